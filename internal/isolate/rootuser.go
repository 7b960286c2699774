//go:build linux

package isolate

// Root inside the sandbox (Spec.HostRootUID): uid 0 of a user namespace
// nested in the sandbox's, mapped to an unprivileged host uid of its own,
// with no capability in any set, no_new_privs and the same seccomp filter as
// every other process of the sandbox. It owns what the sandbox gives it
// (/root, the files it creates on the root directory's tmpfs) and nothing of
// the host: the system directories stay read-only binds, and host files show
// as nobody's. It can't touch the agent (uid 1000): without CAP_KILL it
// can't signal it, the seccomp filter keeps ptrace and prlimit/setpriority
// of other processes from everyone, and the agent's /proc files are out of
// its reach because uid 0 is not mapped in the sandbox's own namespace — a
// non-dumpable process's /proc files belong to uid 0 of the namespace its
// memory was made in, where one exists: were root the sandbox's own uid 0,
// it could write the agent's oom_score_adj and have the OOM killer end it.
// In the sandbox's namespace (the agent's view) root is RootOuterUID, which
// /etc/passwd also names root. The nested namespace maps the user (1000,
// 100) too, so root sees the user's files as theirs.
//
// No process of the sandbox can setuid(0) (none holds CAP_SETUID), so root's
// processes come from a broker: stage 1 starts it as uid 0 before dropping
// its own capabilities; it hardens itself as stage 1 does (stage 3: every
// thread in place where chosen (ReexecEnv) and possible, else this thread
// and a re-exec)
// and listens on RootSocket (stage 4). `sudo` (SudoPath, this
// binary bound read-only) asks it to start a command as root with the
// caller's stdin, stdout and stderr, relays signals and exits as the command
// did. Anyone in the sandbox may ask, as E2B's user has passwordless sudo:
// root here is a convenience within the sandbox, not a privilege over it.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// maxRootRequest bounds a request to the broker (argv and environment).
const maxRootRequest = 256 << 10

type rootRequest struct {
	// Op is "" (run Path with Args, Env, Dir and the three fds sent along)
	// or "open" (open Path as root with Flags and Perm, creating its parent
	// directories first with Mkdir, and send the fd back).
	Op    string   `json:"op,omitempty"`
	Path  string   `json:"path"`
	Args  []string `json:"args,omitempty"`
	Env   []string `json:"env,omitempty"`
	Dir   string   `json:"dir,omitempty"`
	Flags int      `json:"flags,omitempty"`
	Perm  uint32   `json:"perm,omitempty"`
	Mkdir bool     `json:"mkdir,omitempty"`
}

// RootAvailable reports whether this sandbox has a root user (its broker
// listens, or will before the sandbox reports ready); called inside the
// sandbox.
func RootAvailable() bool {
	if rootConfigured {
		return true
	}
	fi, err := os.Lstat(RootSocket)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// rootConfigured: this process is a sandbox's stage 2 (its agent) and the
// sandbox has a root user. Its broker may not listen yet (stage 2 starts
// its work before it waits for it, and the sandbox is ready only once the
// broker listens), so the agent can't go by the socket: it decided "no
// root" on a busy host (TestOfficialJSSDKCompat's root steps in CI).
var rootConfigured bool

// prepareRootUser runs in stage 1 while the new root is built at nr (the
// binary's fd comes from the host's mount namespace copy, which the pivot
// detaches): root's home and the broker's directory, owned by uid 0, and the
// sudo binary, read-only.
func prepareRootUser(nr string, cfg *childConfig) error {
	defer unix.Close(cfg.SudoFD)
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		// 0755, not 0700: anyone here may become root (sudo), so nothing
		// is kept from the user by it, and the user's kernels and the
		// agent can use /root as a working directory and list it.
		{RootHome, 0o755}, {RootDir, 0o755}, {RootDir + "/bin", 0o755}} {
		p := nr + d.path
		if err := os.Mkdir(p, d.mode); err != nil {
			return fmt.Errorf("root user: %w", err)
		}
		if err := os.Chown(p, RootOuterUID, RootOuterGID); err != nil {
			return fmt.Errorf("root user: %w", err)
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return fmt.Errorf("root user: %w", err)
		}
	}
	f, err := os.OpenFile(nr+SudoPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("root user: %w", err)
	}
	f.Close()
	if err := mount("/proc/self/fd/"+strconv.Itoa(cfg.SudoFD), nr+SudoPath, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("root user: %w", err)
	}
	if err := remountTreeReadOnly(nr + SudoPath); err != nil {
		return fmt.Errorf("root user: %w", err)
	}
	return nil
}

// sudoOnPath puts sudo into /usr/local/bin, which every PATH has (a login
// shell's too: Debian's /etc/profile resets PATH): a read-only overlay of a
// directory holding only a sudo script over the system's own, so nothing
// of /usr/local/bin is hidden and nothing can be written there. Runs after
// the pivot (every path is inside the sandbox's root); without
// /usr/local/bin, or where the kernel refuses the overlay, sudo is at
// SudoPath only.
func sudoOnPath() error {
	if fi, err := os.Lstat("/usr/local/bin"); err != nil || !fi.IsDir() {
		return nil
	}
	dir := RootDir + "/path"
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("root user: %w", err)
	}
	script := "#!/bin/sh\nexec " + SudoPath + " \"$@\"\n"
	if err := os.WriteFile(dir+"/sudo", []byte(script), 0o755); err != nil {
		return fmt.Errorf("root user: %w", err)
	}
	for _, p := range []string{dir + "/sudo", dir} {
		if err := os.Chown(p, RootOuterUID, RootOuterGID); err != nil {
			return fmt.Errorf("root user: %w", err)
		}
	}
	if err := unix.Mount("overlay", "/usr/local/bin", "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "lowerdir="+dir+":/usr/local/bin"); err != nil {
		fmt.Fprintf(os.Stderr, "isolate: sudo at %s only, not in /usr/local/bin: overlay: %v\n", SudoPath, err)
	}
	return nil
}

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

// dialRoot connects to the root broker. The broker may still be held
// (ChildAsync holds it until root is first asked for) or starting: its socket appears, by a rename, only once it listens. A
// missing socket releases the broker (stage 2, its holder, then waits for
// its status; any other process of the sandbox's user may signal it too:
// that user owns root's user namespace) and is waited for, up to
// brokerStartTimeout; any other error is final.
func dialRoot() (*net.UnixConn, error) {
	if err := awaitRootBroker(); err != nil {
		return nil, fmt.Errorf("the sandbox's root user is not available: %w", err)
	}
	addr := &net.UnixAddr{Name: RootSocket, Net: "unixpacket"}
	deadline := time.Now().Add(brokerStartTimeout)
	released := false
	pid := 0
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		c, err := net.DialUnix("unixpacket", nil, addr)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("the sandbox's root broker: %w", err)
		}
		if !released {
			released = true
			// Best effort: a pid that isn't the held broker (root may
			// rewrite the file) gets a SIGCONT, which only continues a
			// stopped process of the user's own.
			if pid = readBrokerPid(); pid > 1 {
				_ = unix.Kill(pid, unix.SIGCONT)
			}
		} else if pid > 1 && procstat.Ended(pid, 0) {
			// It exited without listening: no use waiting (its
			// /proc/PID/stat, which anyone may read, says so). A reused
			// pid only makes this wait the whole timeout.
			return nil, fmt.Errorf("the sandbox's root broker exited before it listened (the sandbox's log says why)")
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the sandbox's root broker is not listening after %v (it failed to start or was removed; the sandbox's log says why): %w", brokerStartTimeout, err)
		}
		time.Sleep(delay)
	}
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

// rootStage3 hardens the broker as stage 1 hardens itself: in place (where
// chosen, ReexecEnv) on every thread, then it goes on as stage 4; else, or
// where it can't change every thread (cgo), on this one, then it
// re-executes (stage 4) so that every thread has the result. Never
// returns.
func rootStage3(cfg *childConfig) {
	runtime.LockOSThread()
	st := os.NewFile(uintptr(cfg.StatusFD), "status")
	fail := func(err error) {
		fmt.Fprintf(st, "error: %v\n", err)
		os.Exit(1)
	}
	unix.CloseOnExec(cfg.ExeFD)
	inPlace := wantInPlace()
	if inPlace {
		err := dropPrivileges(allThreads, false)
		if errors.Is(err, syscall.ENOTSUP) {
			// The first change already: nothing changed anywhere.
			inPlace = false
		} else if err != nil {
			fail(err)
		}
	}
	if !inPlace {
		if err := dropPrivileges(thisThread, false); err != nil {
			fail(err)
		}
	}
	if err := loadSeccomp(inPlace); err != nil {
		fail(err)
	}
	cfg.Stage = 4
	if inPlace {
		// What the exec would have closed: the binary's fd.
		unix.Close(cfg.ExeFD)
		rootStage4(cfg, st)
	}
	j, _ := json.Marshal(cfg)
	env := []string{envKey + "=" + string(j)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envKey+"=") {
			env = append(env, kv)
		}
	}
	exe := "/proc/self/fd/" + strconv.Itoa(cfg.ExeFD)
	fail(fmt.Errorf("re-exec %s: %w", exe, unix.Exec(exe, []string{"code-sandboxes-root"}, env)))
}

// rootStage4 is the broker: it serves RootSocket until the sandbox ends.
// st is stage 3's *os.File of the status fd when it went on in place (one
// per image: another's finalizer would close the fd), nil after a re-exec.
func rootStage4(cfg *childConfig, st *os.File) {
	os.Unsetenv(envKey)
	if st == nil {
		st = os.NewFile(uintptr(cfg.StatusFD), "status")
	}
	if os.Getenv(gcAfterBrokerEnv) != "" {
		gcNow()
	}
	// Nothing of it for user code (root too) to read or rewrite.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(st, "error: dumpable: %v\n", err)
		os.Exit(1)
	}
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	if os.Getenv(brokerFailEnv) != "" {
		fmt.Fprintf(st, "error: failing as asked (%s)\n", brokerFailEnv)
		os.Exit(1)
	}
	if os.Getenv(slowBrokerEnv) != "" {
		time.Sleep(300 * time.Millisecond) // a busy host's broker (TestRootAvailableBeforeReady)
	}
	// Bound and made everyone's under another name, then renamed into
	// place: a client that finds the socket finds it listening (dialRoot
	// waits only while it is missing).
	tmp := RootSocket + ".new"
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: tmp, Net: "unixpacket"})
	if err == nil {
		ln.SetUnlinkOnClose(false)
		err = os.Chmod(tmp, 0o666)
	}
	if err == nil {
		err = os.Rename(tmp, RootSocket)
	}
	if err != nil {
		fmt.Fprintf(st, "error: listen: %v\n", err)
		os.Exit(1)
	}
	st.Write([]byte("ready\n"))
	st.Close()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				os.Exit(1)
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like
			continue
		}
		go serveRoot(c)
	}
}

// serveRoot starts one command as root for a client and reports its end.
func serveRoot(c *net.UnixConn) {
	defer c.Close()
	buf := make([]byte, maxRootRequest)
	oob := make([]byte, unix.CmsgSpace(3*4))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		return
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			fds, err := unix.ParseUnixRights(&msgs[i])
			if err != nil {
				continue
			}
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), "stdio"))
			}
		}
	}
	reply := func(s string) { c.Write([]byte(s)) }
	var req rootRequest
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) == 0 && json.Unmarshal(buf[:n], &req) == nil && req.Op == "open" && len(files) == 0 {
		serveRootOpen(c, req)
		return
	}
	switch {
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		reply("error request too large")
		return
	case req.Op != "":
		reply("error unknown operation")
		return
	case len(files) != 3:
		reply(fmt.Sprintf("error want stdin, stdout and stderr, got %d descriptors", len(files)))
		return
	case json.Unmarshal(buf[:n], &req) != nil || !filepath.IsAbs(req.Path) || len(req.Args) == 0:
		reply("error malformed request")
		return
	}
	cmd := &exec.Cmd{
		Path: req.Path, Args: req.Args, Env: req.Env, Dir: req.Dir,
		Stdin: files[0], Stdout: files[1], Stderr: files[2],
		// Its own process group, so that the client going away takes
		// everything it started with it.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		reply("error " + err.Error())
		return
	}
	for _, f := range files {
		f.Close()
	}
	files = nil
	pid := cmd.Process.Pid
	reply("started " + strconv.Itoa(pid))
	done := make(chan struct{})
	go func() {
		b := make([]byte, 64)
		for {
			n, err := c.Read(b)
			if err != nil || n == 0 {
				select {
				case <-done:
				default:
					// The client is gone (killed): so is what it ran.
					syscall.Kill(-pid, syscall.SIGKILL)
				}
				return
			}
			if s, ok := strings.CutPrefix(string(b[:n]), "signal "); ok {
				if sig, err := strconv.Atoi(s); err == nil && sig > 0 && sig < 65 {
					syscall.Kill(pid, syscall.Signal(sig))
				}
			}
		}
	}()
	cmd.Wait()
	close(done)
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		reply("signal " + strconv.Itoa(int(ws.Signal())))
	} else {
		reply("exit " + strconv.Itoa(ws.ExitStatus()))
	}
}

// serveRootOpen opens a file as root and sends its fd back ("ok" with the
// fd, or "errno <n> <text>").
func serveRootOpen(c *net.UnixConn, req rootRequest) {
	fail := func(err error) {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EIO
		}
		c.Write([]byte(fmt.Sprintf("errno %d %v", int(errno), err)))
	}
	if !filepath.IsAbs(req.Path) {
		fail(syscall.EINVAL)
		return
	}
	if req.Mkdir {
		if err := os.MkdirAll(filepath.Dir(req.Path), 0o755); err != nil {
			fail(err)
			return
		}
	}
	fd, err := unix.Open(req.Path, req.Flags|unix.O_CLOEXEC|unix.O_NOCTTY, req.Perm&0o7777)
	if err != nil {
		fail(err)
		return
	}
	defer unix.Close(fd)
	c.WriteMsgUnix([]byte("ok"), unix.UnixRights(fd), nil)
}

// RootOpen opens path as the sandbox's root (through its broker): flags
// and perm as open(2)'s; mkdir creates the parent directories first, as
// root. Errors carry the errno (fs.ErrNotExist, fs.ErrPermission… match).
func RootOpen(path string, flags int, perm os.FileMode, mkdir bool) (*os.File, error) {
	req, _ := json.Marshal(rootRequest{Op: "open", Path: path, Flags: flags, Perm: uint32(perm.Perm()), Mkdir: mkdir})
	c, err := dialRoot()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(req); err != nil {
		return nil, fmt.Errorf("the sandbox's root broker: %w", err)
	}
	b := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's root broker: %w", err)
	}
	if rest, ok := strings.CutPrefix(string(b[:n]), "errno "); ok {
		num, _, _ := strings.Cut(rest, " ")
		e, _ := strconv.Atoi(num)
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.Errno(e)}
	}
	fds, err := receivedFDs(oob[:oobn], 1)
	if err != nil || string(b[:n]) != "ok" {
		return nil, fmt.Errorf("the sandbox's root broker: unexpected answer %q (%v)", b[:n], err)
	}
	return os.NewFile(uintptr(fds[0]), path), nil
}

// IsSudo reports whether this process is the sandbox's sudo: the binary run
// by the name sudo where a root broker listens. Call it first thing in main.
func IsSudo() bool {
	if filepath.Base(os.Args[0]) != "sudo" || IsChild() {
		return false
	}
	if RootAvailable() {
		return true
	}
	// The broker's socket gone (root may remove it): still the sandbox's
	// sudo when run from SudoPath, which then says the broker is gone
	// rather than run the program's own main.
	exe, err := os.Executable()
	return err == nil && exe == SudoPath
}

// Sudo runs its arguments as the sandbox's root through the broker and
// returns the exit status to exit with. It understands the options scripts
// pass to sudo (-u root, -E, -H, -n, -S, -k, -i, -s, --).
func Sudo() int {
	args := os.Args[1:]
	shell, chdir := false, ""
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "sudo: "+format+"\n", a...)
		return 1
	}
options:
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		a := args[0]
		args = args[1:]
		switch a {
		case "--":
			break options
		case "-u", "--user":
			if len(args) == 0 {
				return fail("option -u needs a user")
			}
			if u := args[0]; u != "root" && u != "0" && u != "#0" {
				return fail("only root is available here (asked for %q); run as the sandbox's user without sudo", u)
			}
			args = args[1:]
		case "-D", "--chdir":
			if len(args) == 0 {
				return fail("option -D needs a directory")
			}
			chdir = args[0]
			args = args[1:]
		case "-E", "-H", "-n", "-S", "-k", "-P", "--preserve-env", "--non-interactive", "--set-home":
		case "-i", "-s", "--login", "--shell":
			shell = true
		case "-v", "--validate":
			return 0
		default:
			if strings.HasPrefix(a, "--preserve-env=") {
				continue
			}
			return fail("option %s is not supported here (root in this sandbox: -u root, -E, -H, -n, -S, -k, -i, -s)", a)
		}
	}
	if shell {
		sh := "/bin/bash"
		if _, err := os.Stat(sh); err != nil {
			sh = "/bin/sh"
		}
		if len(args) == 0 {
			args = []string{sh, "-l"}
		} else {
			args = []string{sh, "-c", strings.Join(args, " ")}
		}
	}
	if len(args) == 0 {
		return fail("usage: sudo [-u root] [-E] [-i|-s] command [args...]")
	}
	if os.Getenv("PATH") == "" {
		os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") // sudo's secure_path
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sudo: %s: command not found\n", args[0])
		return 1
	}
	if path, err = filepath.Abs(path); err != nil {
		return fail("%v", err)
	}
	dir, _ := os.Getwd()
	if chdir != "" {
		dir = chdir // the broker changes to it, as root
	}
	env := []string{"HOME=" + RootHome, "USER=root", "LOGNAME=root", "SUDO_USER=" + os.Getenv("USER"),
		"SUDO_UID=" + strconv.Itoa(os.Getuid()), "SUDO_GID=" + strconv.Itoa(os.Getgid())}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "USER", "LOGNAME", "SUDO_USER", "SUDO_UID", "SUDO_GID":
		default:
			env = append(env, kv)
		}
	}
	req, _ := json.Marshal(rootRequest{Path: path, Args: args, Env: env, Dir: dir})
	if len(req) > maxRootRequest {
		return fail("arguments and environment too long (over %d bytes)", maxRootRequest)
	}
	c, err := dialRoot()
	if err != nil {
		return fail("%v", err)
	}
	defer c.Close()
	// Signals first, so that none sent once the command runs is lost.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGALRM)
	if _, _, err := c.WriteMsgUnix(req, unix.UnixRights(0, 1, 2), nil); err != nil {
		return fail("the sandbox's root broker: %v", err)
	}
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		return fail("the sandbox's root broker: %v", err)
	}
	if msg, ok := strings.CutPrefix(string(b[:n]), "error "); ok {
		return fail("%s", msg)
	}
	go func() {
		for s := range sigs {
			c.Write([]byte("signal " + strconv.Itoa(int(s.(syscall.Signal)))))
		}
	}()
	n, err = c.Read(b)
	if err != nil {
		return fail("the sandbox's root broker went away: %v", err)
	}
	res := string(b[:n])
	if s, ok := strings.CutPrefix(res, "exit "); ok {
		code, _ := strconv.Atoi(s)
		return code
	}
	if s, ok := strings.CutPrefix(res, "signal "); ok {
		sig, _ := strconv.Atoi(s)
		// End as the command did, by the same signal (its default action
		// once ours is reset); the exit status is the fallback for one
		// that doesn't end a process.
		signal.Reset(syscall.Signal(sig))
		syscall.Kill(os.Getpid(), syscall.Signal(sig))
		time.Sleep(time.Second)
		return 128 + sig
	}
	return fail("unexpected answer %q", res)
}
