package envd

import (
	"errors"

	"golang.org/x/sys/unix"
)

// oPath is O_PATH: procRefusal and openRegular open a path without
// opening the file itself (envd_other.go has none).
const oPath = unix.O_PATH

// openNoMagic opens p as open(2) would, except that /proc's magic links
// (/proc/<pid>/fd/N, /proc/<pid>/root, …) are not followed (ELOOP). On a
// kernel without openat2 (before 5.6) it is a plain open, and only the
// file system check (onProc) guards.
func openNoMagic(p string, flags int, mode uint32) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOSYS) {
		return unix.Open(p, flags, mode)
	}
	return fd, err
}

// onProc reports whether fd is a file of procfs.
func onProc(fd int) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(fd, &st) == nil && st.Type == unix.PROC_SUPER_MAGIC
}
