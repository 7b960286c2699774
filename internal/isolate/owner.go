//go:build linux

package isolate

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	_, err := startOnThread(cmd, owner, nil)
	return err
}

// threadCgroups are the cgroup v1 directories a thread moves into (to)
// before it clones, and back into (back: the same controllers' cgroups of
// this process) after.
type threadCgroups struct {
	to, back []string
}

// startOnThread runs cmd.Start on a thread of its own, locked, changed for
// the start and ended afterwards:
//   - with owner > 0 its effective uid becomes owner (StartOwnedBy);
//   - with cgs it is moved into the cgroups cgs.to first, so that cmd's
//     process is born in them: on cgroup v1 a child starts in the cgroups
//     of the thread that forks it, and a thread can move alone. moved
//     reports whether it was. It is moved back before this returns, so
//     that nothing of this process is ever seen in them (a kill of every
//     process in a sandbox's cgroup must not reach its supervisor).
//
// Never the main thread: Go keeps it (wedged) instead of ending it.
func startOnThread(cmd *exec.Cmd, owner int, cgs *threadCgroups) (moved bool, err error) {
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Pdeathsig != 0 {
		return false, fmt.Errorf("isolate: Pdeathsig would fire at once (the starting thread ends)")
	}
	type result struct {
		moved bool
		err   error
	}
	done := make(chan result, 1)
	work := func() {
		// Never unlocked: the thread ends with the goroutine.
		runtime.LockOSThread()
		moved, err := startChanged(cmd, owner, cgs)
		done <- result{moved, err}
	}
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			moved, err := startChanged(cmd, owner, cgs)
			done <- result{moved, err}
			return // locked: the thread ends
		}
		// The main thread: held here, no other goroutine can run on it,
		// so the work goes to another thread; then it is given back,
		// unchanged.
		inner := make(chan struct{})
		go func() {
			defer close(inner)
			work()
		}()
		<-inner
		runtime.UnlockOSThread()
	}()
	r := <-done
	return r.moved, r.err
}

// startChanged is startOnThread's work, on the thread it locked.
func startChanged(cmd *exec.Cmd, owner int, cgs *threadCgroups) (moved bool, err error) {
	var back []*os.File
	defer func() {
		for _, f := range back {
			f.Close()
		}
	}()
	if cgs != nil {
		// Opened before any move and before the euid changes: a v1
		// move is checked against the credentials of whoever opened
		// the file.
		for _, d := range cgs.back {
			f, err := os.OpenFile(filepath.Join(d, "tasks"), os.O_WRONLY, 0)
			if err != nil {
				cgs = nil // the caller moves the child after its clone
				break
			}
			back = append(back, f)
		}
	}
	moveBack := func() {
		// Best effort: the thread ends anyway, its cgroups with it.
		for _, f := range back {
			_, _ = f.Write([]byte("0"))
		}
	}
	if cgs != nil {
		moved = true
		for _, d := range cgs.to {
			// "0" is this thread: the kernel needs no process-wide
			// lock for it (a move of any other task waits for an RCU
			// grace period after a quiet spell).
			if err := writeFile(d, "tasks", "0"); err != nil {
				moveBack()
				moved = false
				break
			}
		}
	}
	if owner > 0 {
		err = startOwnedBy(cmd, owner)
	} else {
		err = cmd.Start()
	}
	if moved {
		moveBack()
	}
	return moved && err == nil, err
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
