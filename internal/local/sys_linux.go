package local

import "syscall"

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
