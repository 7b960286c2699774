package local

import (
	"os"
	"path/filepath"
	"sync"
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
// write to by definition. Decided once per runtime directory in a process:
// Create asks every time, and the supervisor makes the directory again if
// it went.
func execOnlyDir(rt string) string {
	if d, ok := execOnlyDirs.Load(rt); ok {
		return d.(string)
	}
	d := filepath.Join(rt, execOnlyDirName)
	if c, err := os.UserCacheDir(); err == nil {
		c = filepath.Join(c, "code-sandboxes", "exec")
		// Usable: made, and on a filesystem that allows exec.
		var fs unix.Statfs_t
		if os.MkdirAll(c, 0o700) == nil && unix.Statfs(c, &fs) == nil && fs.Flags&unix.ST_NOEXEC == 0 {
			d = c
		}
	}
	execOnlyDirs.Store(rt, d)
	return d
}

// execOnlyDirs is execOnlyDir's answers, by runtime directory.
var execOnlyDirs sync.Map

// execOnlyDirName is execOnlyDir's entry in a runtime directory: a dot
// name, which no sandbox's directory has (dirName) and sweep leaves alone.
const execOnlyDirName = ".exec"
