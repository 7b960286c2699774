//go:build !linux

package local

import "syscall"

// Local sandboxes need Linux; these only let the package build elsewhere
// (the root package imports it), with the other systems' spellings.

// totalRAM: unknown here; checkpointBound then assumes its floor.
func totalRAM() (int64, bool) { return 0, false }

// statTimes are st's modification and change times in ns (sandboxbin.go).
func statTimes(st *syscall.Stat_t) (mtime, ctime int64) {
	return st.Mtimespec.Nano(), st.Ctimespec.Nano()
}

// execOnlyDir: none (local sandboxes don't start here).
func execOnlyDir(string) string { return "" }

// execOnlyDirName: see sys_linux.go.
const execOnlyDirName = ".exec"
