// Package trace prints a timeline of a sandbox's start-up, for finding where
// a cold start goes. It is off unless CODE_SANDBOXES_TRACE names a file: then
// every process of the start path (the caller, the supervisor, the sandbox's
// init and agent) appends one line per step to it:
//
//	<CLOCK_MONOTONIC ns> <pid> <step>
//
// The monotonic clock is the same for every process of the host, so the lines
// of all of them sort into one timeline (`sort -n`); cmd/code-sandboxes
// `trace` ... or any script can print the deltas.
//
// Inside the sandbox the file is not reachable by path: the supervisor hands
// the sandbox's init an fd of it (named by CODE_SANDBOXES_TRACE_FD), which the
// agent marks close-on-exec (Seal) before anything else runs, so user code
// never inherits it. Tracing is a debugging aid, off in production.
package trace

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Env names the trace file; FDEnv names an inherited fd of it.
const (
	Env   = "CODE_SANDBOXES_TRACE"
	FDEnv = "CODE_SANDBOXES_TRACE_FD"
)

var (
	mu sync.Mutex // serialises writes and Reopen
	f  atomic.Pointer[os.File]
)

func init() {
	open()
	// This package has almost no dependencies, so its init runs early:
	// the gap to the next mark is the other packages' init.
	Mark("process: runtime up")
}

// Reopen re-reads the environment (for a program that sets Env itself).
func Reopen() {
	mu.Lock()
	defer mu.Unlock()
	if old := f.Load(); old != nil && os.Getenv(FDEnv) == "" {
		old.Close()
	}
	f.Store(nil)
	open()
}

func open() {
	if v := os.Getenv(FDEnv); v != "" {
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			f.Store(os.NewFile(uintptr(fd), "trace"))
		}
		return
	}
	if p := os.Getenv(Env); p != "" {
		if w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
			f.Store(w)
		}
	}
}

// On reports whether tracing is on in this process.
func On() bool { return f.Load() != nil }

// File returns the trace file (nil when off), for handing to a child.
func File() *os.File { return f.Load() }

// Seal keeps the trace fd from reaching the processes this one starts.
func Seal() {
	if w := f.Load(); w != nil {
		unix.CloseOnExec(int(w.Fd()))
	}
}

// Mark records that step happened now.
func Mark(step string) {
	if f.Load() == nil {
		return
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	b := strconv.AppendInt(nil, ts.Nano(), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(os.Getpid()), 10)
	b = append(b, ' ')
	b = append(b, step...)
	b = append(b, '\n')
	mu.Lock()
	if w := f.Load(); w != nil {
		_, _ = w.Write(b) // O_APPEND, one write per line: lines never interleave
	}
	mu.Unlock()
}
