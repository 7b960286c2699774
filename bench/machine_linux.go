package main

import "golang.org/x/sys/unix"

// cgroup2Mounted reports whether dir is a cgroup2 file system.
func cgroup2Mounted(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}
