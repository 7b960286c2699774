//go:build !linux

package main

import "errors"

// cgroup2Mounted: cgroups are Linux's; the benchmarks' local sections
// need Linux anyway.
func cgroup2Mounted(string) bool { return false }

// touchFresh: the scale section's control, Linux's.
func touchFresh(n, block int) ([]float64, error) {
	return nil, errors.New("the fresh-memory control needs Linux")
}
