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

// freshMemory is the scale section's control: blocks of memory this
// process maps and touches (one byte a page), keeping each until release.
// Nothing but the machine is measured: the guest kernel's page fault and
// clearing, and on a VM the host's backing of guest memory the guest never
// touched before or handed back (free page reporting). Huge pages are
// declined for the blocks, so that each page costs a fault, as most of a
// create's do.
type freshMemory struct{ held [][]byte }

// touch maps and touches one block of size bytes and returns how long that
// took, in ms.
func (f *freshMemory) touch(size int) (float64, error) {
	page := unix.Getpagesize()
	t := time.Now()
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return 0, err
	}
	_ = unix.Madvise(b, unix.MADV_NOHUGEPAGE)
	for i := 0; i < size; i += page {
		b[i] = 1
	}
	ms := float64(time.Since(t).Nanoseconds()) / 1e6
	f.held = append(f.held, b)
	return ms, nil
}

// release unmaps every block.
func (f *freshMemory) release() {
	for _, b := range f.held {
		_ = unix.Munmap(b)
	}
	f.held = nil
}
