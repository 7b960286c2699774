//go:build linux

package pidwait

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Exited returns once pid, a child of this process that nobody has reaped
// yet, has exited. It leaves the child unreaped (waitid's WNOWAIT), so the
// caller's own Wait then returns at once with the exit status and does
// whatever else it does (os/exec's closes pipes and sets ProcessState).
//
// It returns false when it could not wait this way (no nonblocking pidfds
// before Linux 5.10, or the poller refused the fd): the caller's Wait then
// blocks a thread, as it would have without this.
func Exited(pid int) bool {
	// Our unreaped child: its pid can't be reused before we reap it, so
	// the pidfd names that child even if it has exited already.
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	exited := false
	err = rc.Read(func(fd uintptr) bool {
		// A nonblocking pidfd answers EAGAIN while the process runs; the
		// poller then waits for the pidfd to become readable, which it does
		// when the process exits.
		var info unix.Siginfo
		var err error = unix.EINTR
		for errors.Is(err, unix.EINTR) {
			err = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT, nil)
		}
		if errors.Is(err, unix.EAGAIN) {
			return false
		}
		// Exited, or an error (ECHILD: not our child, or reaped by
		// someone else) that the caller's Wait will report itself.
		exited = err == nil
		return true
	})
	return err == nil && exited
}
