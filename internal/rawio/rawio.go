// Package rawio reads and writes non-blocking descriptors with raw system
// calls, outside the Go scheduler's syscall state.
//
// Go marks every read and write as a system call that might block
// (entersyscall): the first one after a moment when all of a process's Ps
// were idle wakes the runtime's monitor thread (sysmon) through a futex,
// and sysmon then polls every 20 µs while the process is busy. For a
// process that sleeps between short bursts of work, as the agent and its
// callers do for every execution, that is two or three extra thread
// wake-ups per burst. On a 2-vCPU VM the agent's sysmon woke about 12,000
// times a second during back-to-back executions, and the x + 2 round trip
// through a separate agent process fell from 225 to 151 µs p50 (244 to
// 184 in a second run, the two agents interleaved in each) once the
// agent's hot path went raw. A read or write on a descriptor in
// non-blocking mode cannot block, so it needs none of that: it is done here
// with RawSyscall inside the descriptor's syscall.RawConn callbacks, which
// still park the goroutine in the network poller when the descriptor isn't
// ready and still honour deadlines and Close.
//
// O_NONBLOCK belongs to the open file description, not the descriptor:
// New checks it once, so use this only on descriptions no untrusted
// process shares (one that could clear the flag would turn a raw read on
// an empty pipe into a stall of the whole agent). The agent's ends of the
// kernel's pipes are its own; the output pipes' write ends it marks
// through are reopened (kernel.reopenWriteFDs) for that very reason.
package rawio

import (
	"errors"
	"io"
	"syscall"
	"time"
)

// ErrBlocking: the descriptor is in blocking mode, where a raw read could
// stall the whole process; use its own Read and Write.
var ErrBlocking = errors.New("rawio: descriptor is in blocking mode")

// FD is a raw reader and writer over one non-blocking descriptor.
type FD struct {
	rc syscall.RawConn
}

// New returns an FD over c's descriptor, or an error when c has no
// syscall.RawConn, the platform has no raw path, or the descriptor is
// blocking.
func New(c syscall.Conn) (*FD, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	nb := false
	var ferr error
	if err := rc.Control(func(fd uintptr) { nb, ferr = nonBlocking(fd) }); err != nil {
		return nil, err
	}
	if ferr != nil {
		return nil, ferr
	}
	if !nb {
		return nil, ErrBlocking
	}
	return &FD{rc: rc}, nil
}

// Reader returns a raw reader over r's descriptor when it can have one
// (see New), else r itself.
func Reader(r io.Reader) io.Reader {
	if c, ok := r.(syscall.Conn); ok {
		if f, err := New(c); err == nil {
			return f
		}
	}
	return r
}

// Writer is Reader for writing.
func Writer(w io.Writer) io.Writer {
	if c, ok := w.(syscall.Conn); ok {
		if f, err := New(c); err == nil {
			return f
		}
	}
	return w
}

// Read reads once, waiting in the poller while there is nothing to read.
// 0 bytes from a non-empty p is io.EOF.
func (f *FD) Read(p []byte) (int, error) {
	n, _, err := f.ReadSpin(p, time.Time{})
	return n, err
}

// Write writes all of p, waiting in the poller while the descriptor is full.
func (f *FD) Write(p []byte) (int, error) {
	done := 0
	var errno syscall.Errno
	err := f.rc.Write(func(fd uintptr) bool {
		for done < len(p) {
			n, e := write(fd, p[done:])
			switch e {
			case 0:
				done += n
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return done, err
	case errno != 0:
		return done, &syscallError{op: "write", errno: errno}
	}
	return done, nil
}

// syscallError is os.SyscallError's shape (errors.Is(err, syscall.EPIPE)
// holds) without importing os for it.
type syscallError struct {
	op    string
	errno syscall.Errno
}

func (e *syscallError) Error() string { return e.op + ": " + e.errno.Error() }
func (e *syscallError) Unwrap() error { return e.errno }
