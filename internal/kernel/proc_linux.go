//go:build linux

package kernel

import (
	"os"
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
