//go:build linux

// Starting, watching and releasing root's broker (stage 1's side), and the
// fd plumbing it needs.

package isolate

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// gcAfterBrokerEnv, set in a Spec's Env, makes stage 1 collect garbage
// right after starting the broker, and again, in place, once it is stage
// 2, as the broker does once it is stage 4 (TestRootUserUnderGC).
const gcAfterBrokerEnv = "CODE_SANDBOXES_ISOLATE_GC_AFTER_BROKER"

// slowBrokerEnv, set in a Spec's Env, makes the root broker wait before it
// listens (TestRootAvailableBeforeReady).
const slowBrokerEnv = "CODE_SANDBOXES_ISOLATE_SLOW_BROKER"

// brokerFailEnv, set in a Spec's Env, makes the broker fail before it
// listens (TestRootBrokerFails).
const brokerFailEnv = "CODE_SANDBOXES_ISOLATE_BROKER_FAIL"

// startRootBroker starts the broker as uid 0 and stops it (SIGSTOP) as
// soon as it has been executed, before it has done much of its own start:
// two more runs of the binary, whose CPU the kernel's start (python's, the
// longest step of a cold start) needs more on a small host. Stage 2
// releases it (ReleaseRootBroker: Child before it reports ready; with
// ChildAsync, the local agent, only when root is first asked for), or a
// request for root does (dialRoot). It leaves in cfg.BrokerFD the
// read end of the broker's status pipe, open across stage 1's re-exec, on
// which stage 2 learns that it listens or why it failed (watchRootBroker),
// and its pid in cfg.BrokerPid.
//
// Stage 2 may release it although it has no capability and is another
// user: the broker's user namespace is owned by the sandbox's user, who
// holds every capability in it (as every process of the sandbox's user
// does: root here is no privilege over that user, only a convenience for
// it; the reverse is what rootuser.go guards).
//
// Held, the broker is uid 0 of root's namespace with every capability
// there, and without the seccomp filter and no_new_privs it gives itself in
// stage 3 — for as long as nothing asks for root, which may be the
// sandbox's whole life. What keeps code in the sandbox from taking it over
// in that state (a process outside the filter would be an escape from
// it): ptrace, process_vm_readv/writev and pidfd_getfd are denied to
// every process of the sandbox by its filter, and the broker's /proc
// files that give access to its memory and fds (mem, fd, environ, …) are
// owner-only files of root's uid, which the user is not and can't override
// (its capabilities in root's namespace don't count for files of its own).
// Signals do reach it: SIGCONT starts it, as any sudo does; SIGKILL ends
// it, which takes away only the user's own root.
func startRootBroker(cfg *childConfig) error {
	// Raw fds, not *os.File: the read end must outlive this process's
	// image, and an os.File's finalizer would close it once unreachable.
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("root user: status pipe: %w", err)
	}
	statR := p[0]
	statW := os.NewFile(uintptr(p[1]), "broker status")
	bc := *cfg
	bc.Stage, bc.ExeFD, bc.StatusFD, bc.SyncFD, bc.BrokerFD = 3, 3, 4, -1, -1
	bc.Rootfs, bc.RootfsFD, bc.InitFD, bc.Volumes = "", 0, 0, nil
	j, _ := json.Marshal(bc)
	env := []string{envKey + "=" + string(j)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envKey+"=") {
			env = append(env, kv)
		}
	}
	// A duplicate of the binary's fd for the broker: an *os.File made
	// straight from cfg.ExeFD would close it from its GC finalizer once
	// unreachable, and stage 1's own re-exec through /proc/self/fd/ExeFD
	// then fails with ENOENT (seen under load in CI).
	exeDup, err := unix.FcntlInt(uintptr(cfg.ExeFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(statR)
		statW.Close()
		return fmt.Errorf("root user: dup binary fd: %w", err)
	}
	exeFile := os.NewFile(uintptr(exeDup), "exe")
	defer exeFile.Close()
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/3",
		Args:       []string{"code-sandboxes-root"},
		Env:        env,
		Dir:        "/",
		Stderr:     os.Stderr, // the agent's log
		ExtraFiles: []*os.File{exeFile, statW},
		SysProcAttr: &syscall.SysProcAttr{
			// Root of a namespace of its own, nested in the sandbox's (see
			// the top of this file); stage 1 writes its maps with the
			// capabilities it still holds.
			Cloneflags: syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{
				{ContainerID: 0, HostID: RootOuterUID, Size: 1}, {ContainerID: SandboxUID, HostID: SandboxUID, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{
				{ContainerID: 0, HostID: RootOuterGID, Size: 1}, {ContainerID: SandboxGID, HostID: SandboxGID, Size: 1}},
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
			Setsid:                     true,
		},
	}
	// Stage 1's own fds that stage 2 inherits (the status pipe, the
	// caller's ExtraFiles) are no business of the broker's and must not
	// reach it: a copy of the status pipe's write end there would keep
	// Start from ever seeing its EOF.
	restore, err := cloexecInherited()
	if err != nil {
		unix.Close(statR)
		statW.Close()
		return fmt.Errorf("root user: %w", err)
	}
	err = cmd.Start()
	restore()
	statW.Close()
	if err != nil {
		unix.Close(statR)
		return fmt.Errorf("root user: start broker: %w", err)
	}
	// Start returns once the broker has executed: stopped now, it has run
	// at most the first instructions of the runtime's start.
	if err := unix.Kill(cmd.Process.Pid, unix.SIGSTOP); err != nil {
		cmd.Process.Kill()
		unix.Close(statR)
		return fmt.Errorf("root user: hold the broker: %w", err)
	}
	cfg.BrokerPid = cmd.Process.Pid
	if err := os.WriteFile(rootBrokerPidFile, []byte(strconv.Itoa(cfg.BrokerPid)), 0o444); err != nil {
		cmd.Process.Kill()
		unix.Close(statR)
		return fmt.Errorf("root user: %w", err)
	}
	// Not waited for: stage 1 becomes the agent, whose reaper collects it.
	// The read end goes to stage 2 (cleared close-on-exec only now, so the
	// broker never held it).
	if _, err := unix.FcntlInt(uintptr(statR), unix.F_SETFD, 0); err != nil {
		cmd.Process.Kill()
		unix.Close(statR)
		return fmt.Errorf("root user: status pipe: %w", err)
	}
	cfg.BrokerFD = statR
	return nil
}

// brokerStartTimeout bounds each wait for the broker once released: stage
// 2's (awaitRootBroker), and a root request's for its socket.
const brokerStartTimeout = 10 * time.Second

// rootBroker is stage 2's handle on the broker stage 1 started and holds.
var rootBroker struct {
	pid, fd int
	watch   sync.Once
	release sync.Once
	done    chan struct{} // nil: none; closed once it listens or failed
	err     error         // why it failed, once done
}

// watchRootBroker reads the broker's status pipe in the background (once)
// until it says it listens or why it failed, or dies: whoever released it
// (this process, or a sudo of any other, which signals it itself), a
// failure is then on stderr (the agent's log) and in rootBroker.err. No
// timeout here: a held broker may wait for its release for the sandbox's
// whole life; the waits for it (awaitRootBroker) are bounded instead.
func watchRootBroker() {
	b := &rootBroker
	if b.done == nil {
		return
	}
	b.watch.Do(func() {
		go func() {
			b.err = readBrokerStatus(b.fd)
			if b.err != nil {
				fmt.Fprintf(os.Stderr, "code-sandboxes: %v\n", b.err)
			}
			close(b.done)
		}()
	})
}

// ReleaseRootBroker lets the root broker that stage 1 started and holds go
// on with its start (once; later calls, and calls in a sandbox without a
// root user or outside stage 2, do nothing). It doesn't wait: requests
// for root wait until the broker listens (dialRoot). A broker that fails
// is reported on stderr (the agent's log) and to those requests.
func ReleaseRootBroker() {
	b := &rootBroker
	if b.done == nil {
		return
	}
	watchRootBroker()
	b.release.Do(func() {
		trace.Mark("stage 2: root broker released")
		// ESRCH: it died already; its status pipe says why.
		_ = unix.Kill(b.pid, unix.SIGCONT)
	})
}

// awaitRootBroker releases the broker and waits until it listens or
// fails, at most brokerStartTimeout: nil once it listens, or when this
// process holds no broker. A wait that times out is not the answer for
// good: a start slowed by a busy host still serves later requests.
func awaitRootBroker() error {
	if rootBroker.done == nil {
		return nil
	}
	ReleaseRootBroker()
	t := time.NewTimer(brokerStartTimeout)
	defer t.Stop()
	select {
	case <-rootBroker.done:
		return rootBroker.err
	case <-t.C:
		return fmt.Errorf("root user: broker did not start within %v", brokerStartTimeout)
	}
}

// readBrokerPid reads rootBrokerPidFile: 0 if it is missing or not a
// small regular file holding a number (root may replace it with anything:
// nothing here may block or read much).
func readBrokerPid() int {
	f, err := os.OpenFile(rootBrokerPidFile, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return 0
	}
	var b [16]byte
	n, _ := f.Read(b[:])
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

// readBrokerStatus reads, in stage 2, what the broker started by stage 1
// reports on fd: nil once it listens; its error, or that it died, else.
// It closes fd (user code must not inherit it). A broker that fails is
// killed with the sandbox's cgroup.
func readBrokerStatus(fd int) error {
	// Non-blocking, so that the read waits in the poller: a held broker
	// may never be released, and a blocking read would hold an OS thread
	// of the agent for the sandbox's whole life. (The description is
	// ours alone: the broker has the pipe's other end.)
	_ = unix.SetNonblock(fd, true)
	f := os.NewFile(uintptr(fd), "broker status")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if s := strings.TrimSpace(string(b)); s != "ready" {
		if s == "" && err != nil {
			return fmt.Errorf("root user: broker status: %w", err)
		}
		if s == "" {
			s = "exited before it listened"
		}
		return fmt.Errorf("root user: broker: %q", s)
	}
	return nil
}

// reopenFileInChild opens f (the binary) once more, as us, through the
// child's view of the file system (/proc/<pid>/root), and checks it is the
// same file: see reopenInChild.
func reopenFileInChild(pid int, f *os.File) (int, error) {
	canon, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil || !strings.HasPrefix(canon, "/") || strings.HasSuffix(canon, " (deleted)") {
		return -1, fmt.Errorf("%s: cannot tell its path (%q %v); sudo needs the binary on disk", f.Name(), canon, err)
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/root"+canon, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s: open in the sandbox's mount namespace: %w", canon, err)
	}
	var a, b unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &a); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Fstat(fd, &b); err != nil || a.Dev != b.Dev || a.Ino != b.Ino || b.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, fmt.Errorf("%s changed while the sandbox started", canon)
	}
	return fd, nil
}

// cloexecInherited sets close-on-exec on every fd from 3 up that lacks it
// and returns the function that clears it again.
func cloexecInherited() (func(), error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var set []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // closed meanwhile (the listing's own fd), or already
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err == nil {
			set = append(set, fd)
		}
	}
	return func() {
		for _, fd := range set {
			if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
				unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags&^unix.FD_CLOEXEC)
			}
		}
	}, nil
}
