//go:build linux

package kernel

import (
	"os"
	"strconv"
	"syscall"
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
