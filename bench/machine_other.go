//go:build !linux

package main

import "errors"

// cgroup2Mounted: cgroups are Linux's; the benchmarks' local sections
// need Linux anyway.
func cgroup2Mounted(string) bool { return false }

// freshMemory: the scale section's control, Linux's.
type freshMemory struct{}

func (*freshMemory) touch(int) (float64, error) {
	return 0, errors.New("the fresh-memory control needs Linux")
}

func (*freshMemory) release() {}
