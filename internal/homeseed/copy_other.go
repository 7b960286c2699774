//go:build !linux

package homeseed

import "errors"

var errLinux = errors.New("a sandbox's home is seeded on Linux only, where sandboxes run")

// Check needs Linux (copy_linux.go).
func Check(string, Limits) error { return errLinux }

// FromDir needs Linux (copy_linux.go).
func FromDir(string, string, Limits) error { return errLinux }
