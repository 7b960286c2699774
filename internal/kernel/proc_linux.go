//go:build linux

package kernel

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setDeathSignal makes the kernel die with the Go process that started it, so
// a crashed agent leaves no interpreters behind.
func setDeathSignal(a *syscall.SysProcAttr) {
	if a.Pdeathsig == 0 {
		a.Pdeathsig = syscall.SIGKILL
	}
}

// setPipeSize enlarges a pipe (F_SETPIPE_SZ); failure only costs speed.
func setPipeSize(f *os.File) {
	const fSetPipeSz = 1031
	syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), fSetPipeSz, pipeSize)
}

// processGone reports whether pid, a child of ours, has exited: a zombie,
// or reaped already (ECHILD). Every execution asks (Session.kernel), so it
// is one waitid that reaps nothing (WNOWAIT), not a read of /proc/PID/stat
// (an open, a read and a close through os.File: about ten system calls).
func processGone(pid int) bool {
	var info unix.Siginfo
	for {
		// Raw: WNOHANG never blocks, and a raw call doesn't wake the
		// runtime's sysmon thread (see internal/rawio).
		_, _, e := unix.RawSyscall6(unix.SYS_WAITID, unix.P_PID, uintptr(pid), uintptr(unsafe.Pointer(&info)),
			unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e == unix.ECHILD
		}
		// Without a child to report, WNOHANG leaves the zeroed info as it is.
		return info.Signo == int32(unix.SIGCHLD)
	}
}
