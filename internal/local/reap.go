package local

import (
	"errors"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"
)

// reapLater reaps a started supervisor once it exits, so that it never
// lingers as a zombie while we run.
//
// Not with cmd.Wait in a goroutine: that holds an OS thread blocked in
// waitid for the supervisor's whole life, so a caller (serve, the bench)
// with a thousand sandboxes alive held a thousand threads. Threads are not
// free for the other sandboxes either: every sandbox's start calls
// pivot_root, which walks every thread on the host (the kernel's
// chroot_fs_refs), so each one makes every later Create slower (issue 17's
// scale run). Here the exit is awaited on a pidfd through the runtime's
// poller, which parks a goroutine, not a thread.
func reapLater(cmd *exec.Cmd) {
	pid := cmd.Process.Pid
	// Our own unreaped child: its pid can't be reused before we reap it,
	// so the pidfd names the supervisor even if it has exited already.
	pfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		// No pidfds (Linux < 5.3): the thread it is.
		go func() { _ = cmd.Wait() }()
		return
	}
	f := os.NewFile(uintptr(pfd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		go func() { _ = cmd.Wait() }()
		return
	}
	go func() {
		defer f.Close()
		reaped := false
		err := rc.Read(func(fd uintptr) bool {
			// A nonblocking pidfd answers EAGAIN while the process runs;
			// the poller then waits for the pidfd to become readable,
			// which it does when the process exits.
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED, nil)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				return false
			}
			reaped = err == nil
			return true
		})
		if err != nil && !reaped {
			// The poller refused the fd: block a thread after all.
			_ = cmd.Wait()
		}
	}()
}
