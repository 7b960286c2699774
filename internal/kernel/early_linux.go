//go:build linux

package kernel

import (
	"errors"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/pidwait"
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
	pidwait.Exited(p.pid) // on the poller, not a thread blocked in wait4
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

// reopenWriteFDs opens the pipes of out and err (raw fds of either end)
// once more for writing, as open file descriptions of their own
// (non-blocking, unlike the kernel's ends, which share the originals'): the
// pump writes sync markers on them (frameGoMarks). [-1, -1] when either
// can't be opened; the kernel then writes every marker itself. An adopted
// kernel's fds are reopened before they become *os.Files, whose Fd would
// make them blocking.
func reopenWriteFDs(out, err int) [2]int {
	fds := [2]int{-1, -1}
	for i, fd := range []int{out, err} {
		w, e := syscall.Open("/proc/self/fd/"+strconv.Itoa(fd), syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if e != nil {
			if i == 1 {
				syscall.Close(fds[0])
			}
			return [2]int{-1, -1}
		}
		fds[i] = w
	}
	return fds
}
