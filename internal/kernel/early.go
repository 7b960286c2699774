package kernel

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// Early is a kernel process started ahead of the session that runs it, by
// another image of the same process: the sandbox's stage 1 starts the
// default kernel right before it re-executes into the agent, so python's
// start-up overlaps the agent's, and the agent (the same process after the
// exec, so the kernel's parent) adopts it. Only the process and its pipes
// cross the exec; the session's token and hello are made at adoption, as
// for a kernel it starts itself.
type Early struct {
	mu sync.Mutex
	sp *spawned
}

// SpawnEarly starts a kernel as a Session with o would (same interpreter,
// arguments, environment, working directory, fds, process group and death
// signal), without speaking to it yet.
func SpawnEarly(o Options) (*Early, error) {
	sp, err := spawn(&o)
	if err != nil {
		return nil, err
	}
	return &Early{sp: sp}, nil
}

// Pid is the kernel's process id.
func (e *Early) Pid() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sp == nil {
		return 0
	}
	return e.sp.pid
}

// Files are the parent's ends of the kernel's pipes, in AdoptEarly's
// order: stdout, stderr, commands, events. They are close-on-exec; the
// caller clears that for the exec that hands them on (and keeps them
// reachable until then: their finalizers close them).
func (e *Early) Files() [4]*os.File {
	e.mu.Lock()
	defer e.mu.Unlock()
	return [4]*os.File{e.sp.outR, e.sp.errR, e.sp.cmdW, e.sp.evtR}
}

// FDs are Files' descriptors.
func (e *Early) FDs() [4]int {
	var fds [4]int
	for i, f := range e.Files() {
		fds[i] = rawFD(f)
	}
	return fds
}

// rawFD is f's descriptor, without File.Fd's switch to blocking mode (the
// adopter's files must stay pollable, as os.Pipe's are).
func rawFD(f *os.File) int {
	fd := -1
	if c, err := f.SyscallConn(); err == nil {
		c.Control(func(u uintptr) { fd = int(u) })
	}
	return fd
}

// AdoptEarly takes over, after an exec, the kernel another image of this
// process started with SpawnEarly: pid and the fds FDs listed. The fds are
// made close-on-exec again (nothing this process starts may inherit them);
// pid must be a child of this process, else the kernel can't be waited for.
func AdoptEarly(pid int, fds [4]int) (*Early, error) {
	for _, fd := range fds {
		if fd < 3 {
			return nil, fmt.Errorf("kernel: early kernel: bad fd %d", fd)
		}
	}
	if pid <= 1 {
		return nil, errors.New("kernel: early kernel: bad pid")
	}
	for _, fd := range fds {
		syscall.CloseOnExec(fd)
		// Non-blocking, so that os.NewFile puts them in the poller, as
		// os.Pipe's are (the flag is the pipe's: it crossed the exec).
		if err := syscall.SetNonblock(fd, true); err != nil {
			return nil, fmt.Errorf("kernel: early kernel: fd %d: %w", fd, err)
		}
	}
	// Not os.FindProcess: its first call forks a child to probe pidfd
	// support, on the agent's start path.
	p, err := adoptProc(pid)
	if err != nil {
		return nil, fmt.Errorf("kernel: early kernel: %w", err)
	}
	return &Early{sp: &spawned{
		proc: p, pid: pid,
		// Our own write ends of its output pipes (rtt2's markers), opened
		// again here: stage 1's were close-on-exec.
		markW: reopenWriteFDs(fds[0], fds[1]),
		outR:  os.NewFile(uintptr(fds[0]), "kernel stdout"),
		errR:  os.NewFile(uintptr(fds[1]), "kernel stderr"),
		cmdW:  os.NewFile(uintptr(fds[2]), "kernel commands"),
		evtR:  os.NewFile(uintptr(fds[3]), "kernel events"),
	}}, nil
}

// Close kills and reaps the kernel if no session took it.
func (e *Early) Close() {
	if sp := e.take(); sp != nil {
		sp.proc.kill()
		sp.proc.wait()
		for _, f := range []*os.File{sp.outR, sp.errR, sp.cmdW, sp.evtR} {
			f.Close()
		}
		for _, fd := range sp.markW {
			if fd >= 0 {
				syscall.Close(fd)
			}
		}
	}
}

// take hands the process out once (nil afterwards, and for a nil e).
func (e *Early) take() *spawned {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	sp := e.sp
	e.sp = nil
	return sp
}
