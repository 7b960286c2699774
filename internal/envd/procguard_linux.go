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

// fstatfs and fstat are the calls onProc asks (tests swap them for the
// answers gVisor gives).
var (
	fstatfs = unix.Fstatfs
	fstat   = unix.Fstat
)

// onProc reports whether fd is a file of procfs. When the file system can't
// be asked (gVisor answers fstatfs on an O_PATH descriptor with ENOSYS), it
// compares the file's device with /proc's own; when that can't be told
// either, the answer is yes: a file we can't place is refused, never served.
func onProc(fd int) bool {
	var sfs unix.Statfs_t
	if err := fstatfs(fd, &sfs); err == nil {
		return sfs.Type == unix.PROC_SUPER_MAGIC
	}
	var st, proc unix.Stat_t
	if fstat(fd, &st) != nil || unix.Stat("/proc", &proc) != nil {
		return true
	}
	if st.Dev == proc.Dev {
		return true
	}
	// /proc/sys may be a mount of its own (runtimes mount it read-only).
	var sys unix.Stat_t
	if err := unix.Stat("/proc/sys", &sys); err != nil {
		return !errors.Is(err, unix.ENOENT)
	}
	return st.Dev == sys.Dev
}
