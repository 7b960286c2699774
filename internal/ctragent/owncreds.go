//go:build linux

package ctragent

// The agent's own uid under gVisor. Code in the sandbox runs as the
// agent's real and effective uid (the contract's 1000), and gVisor doesn't
// apply the agent's PR_SET_DUMPABLE 0 to that uid: it could open the
// agent's descriptors through /proc/1/fd/N (measured: reopening a pipe is
// checked against the pipe's owner and mode only). So the agent keeps a uid
// of its own as its saved uid (no privilege is left: every uid is
// non-zero) and becomes it, on one thread at a time, to make what must stay
// out of that code's reach: the kernels' command and event pipes, and the
// pause handshake's files and socket (whose directory the host makes that
// uid's). A pipe made so is that uid's, mode 0600: the sandbox user can't
// open it again, while the kernel that inherited one end uses it as
// before. Processes the agent starts exec with their saved uid reset to
// the effective one (1000): they can't become the agent's uid.

import (
	"fmt"
	"runtime"
	"syscall"
)

// asUID runs fn on a locked thread whose effective uid is uid (the
// agent's saved uid), then gives the thread back its effective uid. A
// thread whose uid could not be restored stays locked, so that it ends
// with its goroutine and nothing else runs on it.
func asUID(uid int, fn func() error) error {
	runtime.LockOSThread()
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		runtime.UnlockOSThread()
		return fmt.Errorf("becoming the agent's uid %d: %w", uid, e)
	}
	err := fn()
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), uintptr(sandboxUID), ^uintptr(0)); e != 0 {
		return fmt.Errorf("back from the agent's uid %d: %w", uid, e)
	}
	runtime.UnlockOSThread()
	return err
}
