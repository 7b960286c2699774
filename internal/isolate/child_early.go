//go:build linux

// The early start: a command the child starts before its first request
// (SetEarlyStart), and the state it hands back.

package isolate

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// earlyStart is SetEarlyStart's function; earlyState, in stage 2, what it
// returned in stage 1. earlyKeep, in place, keeps what it returned
// reachable for good (their finalizers would close the fds stage 2 uses).
var (
	earlyStart func() (state string, keep []*os.File)
	earlyState string
	//lint:ignore U1000 never read: it only keeps the files reachable.
	earlyKeep []*os.File
)

// SetEarlyStart makes stage 1 call f right before it becomes stage 2 (in
// place, or by re-executing; call it before ChildAsync, in the sandbox's
// init). f runs fully sandboxed — uid, gid, rlimits, cgroup and namespaces
// final, no capabilities, no_new_privs, the seccomp filter, cwd /home/user —
// on stage 1's locked thread, so a process it starts has exactly the state a
// process stage 2 starts would have, and has stage 2 as its parent (its
// death signal stays armed: across the exec, or in place with the thread,
// which stays). While f runs every fd of the process is close-on-exec, so
// what it starts inherits only what it passes explicitly. It returns a
// short state for stage 2 (EarlyState) and the files whose fds stage 2 must
// get too (for a re-exec their close-on-exec is cleared and they stay
// reachable until it; in place they stay as they are, reachable for good).
// It must not close the fds it found open. What it starts runs while stage
// 2 sets up.
func SetEarlyStart(f func() (state string, keep []*os.File)) { earlyStart = f }

// EarlyState is, in stage 2, what SetEarlyStart's function returned in
// stage 1 ("" = none, or nothing started).
func EarlyState() string { return earlyState }

// maxEarlyState bounds the state (it travels in stage 2's environment).
const maxEarlyState = 4 << 10

// runEarlyStart runs earlyStart with every inherited fd close-on-exec, then
// restores what stage 2 inherits and, for a re-exec (forExec), makes what
// earlyStart keeps inheritable too (in place they stay close-on-exec).
func runEarlyStart(forExec bool) (string, []*os.File, error) {
	restore, err := cloexecInherited()
	if err != nil {
		return "", nil, fmt.Errorf("early start: %w", err)
	}
	state, keep := earlyStart()
	restore()
	if len(state) > maxEarlyState {
		return "", nil, fmt.Errorf("early start: state of %d bytes", len(state))
	}
	for _, f := range keep {
		if !forExec {
			break
		}
		// Not f.Fd(), which would make the fd blocking for stage 2 too.
		c, err := f.SyscallConn()
		if err == nil {
			cerr := c.Control(func(fd uintptr) { _, err = unix.FcntlInt(fd, unix.F_SETFD, 0) })
			if err == nil {
				err = cerr
			}
		}
		if err != nil {
			return "", nil, fmt.Errorf("early start: %s: %w", f.Name(), err)
		}
	}
	trace.Mark("stage 1: early start done")
	return state, keep, nil
}
