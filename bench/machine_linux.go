package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// cgroup2Mounted reports whether dir is a cgroup2 file system.
func cgroup2Mounted(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// touchFresh is the scale section's control: it maps and touches (one byte
// a page) n blocks of block bytes, keeping each, and returns the time each
// block took. Nothing but the machine is measured: the guest kernel's page
// fault and clearing, and on a VM the host's backing of guest memory the
// guest never touched before or handed back (free page reporting).
func touchFresh(n, block int) ([]float64, error) {
	var held [][]byte
	defer func() {
		for _, b := range held {
			_ = unix.Munmap(b)
		}
	}()
	ms := make([]float64, 0, n)
	page := unix.Getpagesize()
	for range n {
		t := time.Now()
		b, err := unix.Mmap(-1, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			return ms, err
		}
		for i := 0; i < block; i += page {
			b[i] = 1
		}
		ms = append(ms, float64(time.Since(t).Microseconds())/1000)
		held = append(held, b)
	}
	return ms, nil
}
