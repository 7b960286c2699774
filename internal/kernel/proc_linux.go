//go:build linux

package kernel

import (
	"errors"
	"os"
	"strconv"
	"syscall"

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

// reopenWriteEnds opens the pipes of out and err once more for writing, as
// open file descriptions of their own (non-blocking, unlike the kernel's
// ends, which share the originals'): the pump writes sync markers on them
// (frameGoMarks). [-1, -1] when either can't be opened; the kernel then
// writes every marker itself.
func reopenWriteEnds(out, err *os.File) [2]int {
	fds := [2]int{-1, -1}
	for i, f := range []*os.File{out, err} {
		fd, e := syscall.Open("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if e != nil {
			if i == 1 {
				syscall.Close(fds[0])
			}
			return [2]int{-1, -1}
		}
		fds[i] = fd
	}
	return fds
}

// processGone reports whether pid, a child of ours, has exited: a zombie,
// or reaped already (ECHILD). Every execution asks (Session.kernel), so it
// is one waitid that reaps nothing (WNOWAIT), not a read of /proc/PID/stat
// (an open, a read and a close through os.File: about ten system calls).
func processGone(pid int) bool {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return errors.Is(err, unix.ECHILD)
		}
		// Without a child to report, WNOHANG leaves the zeroed info as it is.
		return info.Signo == int32(unix.SIGCHLD)
	}
}
