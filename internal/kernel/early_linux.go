//go:build linux

package kernel

import (
	"errors"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// pidfdProc is an adopted kernel (AdoptEarly): a child of this process that
// another image of it started. Signals go through a pidfd, so a kill after
// the reap can't reach a process that reused the pid.
type pidfdProc struct {
	pid int
	mu  sync.Mutex
	fd  int // -1 once reaped
}

func adoptProc(pid int) (kernelProc, error) {
	fd, err := unix.PidfdOpen(pid, 0) // close-on-exec
	if err != nil {
		return nil, err
	}
	return &pidfdProc{pid: pid, fd: fd}, nil
}

func (p *pidfdProc) kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return os.ErrProcessDone
	}
	return unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
}

func (p *pidfdProc) wait() error {
	var ws syscall.WaitStatus
	var err error
	for {
		_, err = syscall.Wait4(p.pid, &ws, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	p.mu.Lock()
	unix.Close(p.fd)
	p.fd = -1
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if ws.Exited() && ws.ExitStatus() == 0 {
		return nil
	}
	return exitStatus(ws)
}
