//go:build !linux

package cpupin

// Pin does nothing here: -1, nil.
func Pin(string) (int, error) { return -1, nil }

// Unpinned is fn().
func Unpinned(fn func() error) error { return fn() }

// Away does nothing here.
func Away(int, string) {}

// Full is "": nothing is pinned here.
func Full() string { return "" }
