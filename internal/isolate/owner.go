package isolate

import (
	"fmt"
	"os/exec"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// StartOwnedBy starts cmd, which makes a new user namespace
// (Cloneflags CLONE_NEWUSER), so that the namespace's owner is host uid
// owner rather than the caller's uid (root).
//
// Why: what the kernel counts per user inside a user namespace (inotify
// instances and watches, user namespaces, …) is also charged, level by
// level, to the namespace's owner in its parent namespace, against the
// parent's limit. Created by root, every sandbox's counts are charged to
// root's: one sandbox holding its 128 inotify instances left none for any
// other sandbox, nor for the host's root services (the hostile suite's
// SharedUIDLimits). Owned by the sandbox's own host uid, they are the
// sandbox's alone.
//
// The owner is the effective uid of the thread that clones. cmd must not
// set Pdeathsig: the thread that starts it is thrown away. The start runs
// on a thread of its own, locked and thrown away afterwards (its
// credentials are changed, so no other goroutine may ever run on it): its
// effective uid becomes owner with its capabilities kept in effect (the
// parent writes the child's id maps, which needs CAP_SETUID and
// CAP_SETGID), and the rest of the process stays as it was.
func StartOwnedBy(cmd *exec.Cmd, owner int) error {
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Pdeathsig != 0 {
		return fmt.Errorf("StartOwnedBy: Pdeathsig would fire at once (the starting thread ends)")
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread exits with the goroutine.
		runtime.LockOSThread()
		errc <- startOwnedBy(cmd, owner)
	}()
	return <-errc
}

func startOwnedBy(cmd *exec.Cmd, owner int) error {
	// This thread only (the raw syscall, not Go's all-threads Setresuid).
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(owner), ^uintptr(0)); e != 0 {
		return fmt.Errorf("seteuid(%d) to own the sandbox's user namespace: %w", owner, e)
	}
	// Leaving euid 0 cleared the effective set; the permitted set is
	// intact: bring it back into effect, on this thread.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := unix.RawSyscall(unix.SYS_CAPGET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capget: %w", e)
	}
	data[0].Effective, data[1].Effective = data[0].Permitted, data[1].Permitted
	if _, _, e := unix.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	// The euid change made the process not dumpable (the kernel does so
	// on any credential change), which makes /proc/<child> root's until
	// the child execs (it shares our memory until then): we, now uid
	// owner, could not write its id maps. Dumpable for the start only;
	// back as it was after (the process-wide flag).
	prev, _, _ := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_DUMPABLE, 0, 0)
	if _, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 1, 0); e != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 1): %w", e)
	}
	err := cmd.Start()
	if _, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, prev, 0); e != 0 && err == nil {
		err = fmt.Errorf("prctl(PR_SET_DUMPABLE, %d): %w", prev, e)
	}
	return err
}
