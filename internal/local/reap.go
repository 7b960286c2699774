package local

import (
	"os/exec"

	"github.com/code-sandboxes/code-sandboxes/internal/pidwait"
)

// reapLater reaps a started supervisor once it exits, so that it never
// lingers as a zombie while we run.
//
// Not with cmd.Wait alone in a goroutine: that holds an OS thread blocked
// in waitid for the supervisor's whole life, so a caller (serve, the bench)
// with a thousand sandboxes alive held a thousand threads. Threads are not
// free for the other sandboxes either: every sandbox's start calls
// pivot_root, which walks every thread on the host (the kernel's
// chroot_fs_refs), so each one makes every later Create slower (issue 17's
// scale run). pidwait awaits the exit on the runtime's poller (a pidfd),
// which parks a goroutine, not a thread; cmd.Wait then returns at once.
func reapLater(cmd *exec.Cmd) {
	go func() {
		pidwait.Exited(cmd.Process.Pid)
		_ = cmd.Wait()
	}()
}
