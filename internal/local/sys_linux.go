package local

import (
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// totalRAM is the host's memory in bytes (checkpointBound).
func totalRAM() (int64, bool) {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0, false
	}
	return int64(si.Totalram) * int64(si.Unit), true
}

// statTimes are st's modification and change times in ns (sandboxbin.go).
func statTimes(st *syscall.Stat_t) (mtime, ctime int64) {
	return st.Mtim.Nano(), st.Ctim.Nano()
}

// execOnlyDir is where the execute-only copies of sandbox binaries are
// kept (isolate.Spec.ExecOnlyDir): the caller's cache directory, which
// outlives the runtime directories tests make by the dozen (a copy per
// binary, not per runtime directory), else (no home, a read-only one, or
// noexec) the runtime directory's execOnlyDirName, which the caller can
// write to by definition.
func execOnlyDir(rt string) string {
	if d, err := os.UserCacheDir(); err == nil {
		d = filepath.Join(d, "code-sandboxes", "exec")
		// Usable: made, and on a filesystem that allows exec.
		var fs unix.Statfs_t
		if os.MkdirAll(d, 0o700) == nil && unix.Statfs(d, &fs) == nil && fs.Flags&unix.ST_NOEXEC == 0 {
			return d
		}
	}
	return filepath.Join(rt, execOnlyDirName)
}

// execOnlyDirName is execOnlyDir's entry in a runtime directory: a dot
// name, which no sandbox's directory has (dirName) and sweep leaves alone.
const execOnlyDirName = ".exec"
