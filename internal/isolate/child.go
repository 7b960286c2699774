//go:build linux

package isolate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// IsChild reports whether this process was started by Start and must call
// Child before doing anything else.
func IsChild() bool {
	_, ok := os.LookupEnv(envKey)
	return ok
}

// Child completes the sandbox setup in the process started by Start. Call it
// first thing in main when IsChild is true.
//
// The setup (stage 1) changes what is per-thread (the cgroup namespace,
// securebits, every capability set, no_new_privs, the seccomp filter) on
// the calling thread and re-executes the binary, which calls Child again:
// every thread of the new image is a copy of that one. Where chosen
// (ReexecEnv; not the default, see inPlaceByDefault) and where the runtime
// can (not with cgo), it instead changes every thread of the process
// (syscall.AllThreadsSyscall, TSYNC) and goes on as the final stage in
// place, doing what the exec did: the fds it doesn't hand on are
// closed, the environment is stage 2's, and the config's text in the
// initial environment is wiped. On failure it reports the error to Start
// and exits with status 1. In the final stage it returns nil with the
// process sandboxed: uid 1000, gid 100, no capabilities in any set,
// no_new_privs, seccomp filter, rlimits, cwd /home/user, and the package's
// environment variable removed. Hardened in place, the calling goroutine
// stays locked to its thread for good: the process the early start forked
// (SetEarlyStart) has that thread as its parent, its death signal tied to
// it; the caller must not unlock it (nor end the goroutine: it is main's).
func Child() error {
	ready, err := childAsync(false)
	if err != nil {
		return err
	}
	return ready()
}

// ChildAsync is Child, except that in the final stage it returns before it
// reports the sandbox ready to Start, and the root user's broker (if any)
// stays held: ready (call it once) reports, and the broker starts on
// ReleaseRootBroker or the first request for root (dialRoot), not before.
// Most sandboxes never ask for root: held, the broker has run only the
// first instructions of its exec, so it costs neither its Go start's CPU
// (which would compete with the kernel's start and with the next
// sandboxes' on a small host) nor the memory of a started Go runtime
// (about 1.2 MB); the first root request waits for that start instead.
// The process is fully sandboxed already, so the caller can start work
// that needs no more (a kernel) before it calls ready; the status and
// broker pipes are close-on-exec, so no process started meanwhile
// inherits them. Root's requests made before the broker listens wait for
// it (dialRoot); a broker that fails is reported on stderr and to them.
func ChildAsync() (ready func() error, err error) { return childAsync(true) }

// childAsync is ChildAsync; hold: the root broker waits for
// ReleaseRootBroker (else ready releases it and reports only once it
// listens, failing the start if it fails).
func childAsync(hold bool) (ready func() error, err error) {
	raw, ok := os.LookupEnv(envKey)
	if !ok {
		return nil, errors.New("isolate: not a sandbox child")
	}
	var cfg childConfig
	b := []byte(raw)
	err = json.Unmarshal(b, &cfg)
	clear(b)
	if err != nil {
		return nil, fmt.Errorf("isolate: bad child config: %w", err)
	}
	switch cfg.Stage {
	case 3:
		rootStage3(&cfg) // never returns
	case 4:
		rootStage4(&cfg, nil) // never returns
	}
	if cfg.Stage == 2 {
		trace.Mark("stage 2: start")
		os.Unsetenv(envKey)
		return stage2(&cfg, os.NewFile(uintptr(cfg.StatusFD), "status"), hold), nil
	}

	// Stage 1. Every per-thread change (cgroup namespace, capabilities,
	// no_new_privs, seccomp) is made on this thread, and, in place, on
	// every other thread too; this thread forks the early start, whose
	// death signal is tied to it: so it stays locked for good (in place,
	// the caller's goroutine keeps it: it must not unlock it).
	runtime.LockOSThread()
	trace.Mark("stage 1: start")
	st := os.NewFile(uintptr(cfg.StatusFD), "status")
	if err = stage1(&cfg); err == nil {
		// Hardened in place: this process is stage 2 now (finishInPlace
		// wiped the config from the initial environment).
		trace.Mark("stage 2: start")
		if os.Getenv(gcAfterBrokerEnv) != "" {
			gcNow() // the test's way to find what only a finalizer closes
		}
		// The same *os.File: a second one for the fd would leave this one
		// unreachable, and its finalizer would close the fd under stage 2
		// (Start then sees EOF, no "ready", and kills the sandbox).
		return stage2(&cfg, st, hold), nil
	}
	fmt.Fprintf(st, "error: %v\n", err)
	os.Exit(1)
	return nil, nil
}

// wipeInitialEnv overwrites with spaces the value of key in the initial
// environment, the memory /proc/self/environ reads (through /proc/self/mem:
// its bounds come from /proc/self/stat).
func wipeInitialEnv(key string) error {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return fmt.Errorf("wipe the config: %w", err)
	}
	// Fields after the command's closing parenthesis start at field 3;
	// env_start and env_end are fields 50 and 51.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 49 {
		return fmt.Errorf("wipe the config: /proc/self/stat has %d fields", len(f)+2)
	}
	start, err1 := strconv.ParseInt(f[47], 10, 64)
	end, err2 := strconv.ParseInt(f[48], 10, 64)
	if err1 != nil || err2 != nil || end < start || end-start > 1<<30 {
		return fmt.Errorf("wipe the config: environment at %q-%q", f[47], f[48])
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("wipe the config: %w", err)
	}
	defer mem.Close()
	env := make([]byte, end-start)
	if _, err := mem.ReadAt(env, start); err != nil {
		return fmt.Errorf("wipe the config: %w", err)
	}
	prefix := []byte(key + "=")
	for off := 0; off < len(env); {
		n := bytes.IndexByte(env[off:], 0)
		if n < 0 {
			n = len(env) - off
		}
		if bytes.HasPrefix(env[off:off+n], prefix) {
			v := env[off+len(prefix) : off+n]
			for i := range v {
				v[i] = ' '
			}
			if _, err := mem.WriteAt(v, start+int64(off+len(prefix))); err != nil {
				return fmt.Errorf("wipe the config: %w", err)
			}
		}
		off += n + 1
	}
	return nil
}

// gcNow collects garbage and gives the finalizers it queued time to run
// (gcAfterBrokerEnv).
func gcNow() {
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
}

// stage2 finishes the start as the sandboxed process (after stage 1's
// re-exec, or in place): it returns ChildAsync's ready (Child's with
// hold false). st is the status fd's one *os.File in this image.
func stage2(cfg *childConfig, st *os.File, hold bool) func() error {
	rootConfigured = cfg.RootUser
	earlyState = cfg.Early
	// Both came through stage 1 (its exec, or in place) without
	// close-on-exec.
	unix.CloseOnExec(cfg.StatusFD)
	if cfg.BrokerFD > 2 {
		unix.CloseOnExec(cfg.BrokerFD)
		rootBroker.pid, rootBroker.fd = cfg.BrokerPid, cfg.BrokerFD
		rootBroker.done = make(chan struct{})
		// Whoever releases it (a sudo signals it itself), its failure
		// reaches the log.
		watchRootBroker()
	}
	return func() error {
		if cfg.BrokerFD > 2 && !hold {
			// The sandbox is ready only once the broker listens.
			if err := awaitRootBroker(); err != nil {
				fmt.Fprintf(st, "error: %v\n", err)
				os.Exit(1)
			}
			trace.Mark("stage 2: root broker ready")
		}
		_, err := st.Write([]byte("ready\n"))
		st.Close()
		if err != nil {
			return fmt.Errorf("isolate: report ready: %w", err)
		}
		return nil
	}
}

// stage1 sets the sandbox up and hardens the process. It returns nil when
// it did so in place (every thread changed: the caller goes on as stage 2);
// otherwise it re-executes the binary into stage 2 and returns only on
// failure.
func stage1(cfg *childConfig) error {
	// Executed from an execute-only copy (Spec.ExecOnlyDir), stage 1 starts
	// not dumpable where it can't read the copy (a root caller's: its owner
	// is not mapped here). It needs to be, until the early start (which makes it
	// not dumpable again, see there): the root broker's start writes its
	// child's id maps, which a not-dumpable child (it inherits the flag)
	// refuses, and in place the config's wipe reads /proc/self/mem. Nothing
	// of the user's runs in the sandbox before the early start.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	// Only the fds Start passed (stdio, the caller's ExtraFiles, the
	// binary, sync and status) may reach stage 2: any other fd the caller
	// held without close-on-exec (inherited from whatever started it) would
	// otherwise reach the agent and every process it starts. In place they
	// are closed, not only close-on-exec: stage 2 may be this same image.
	// Stage 1 run from its own binary (Spec.Init) can't go on as stage
	// 2 in place: this image is not the one stage 2 runs.
	inPlace := wantInPlace() && cfg.InitFD == 0
	closeFDs := cloexecFrom
	if inPlace {
		closeFDs = closeInherited
	}
	if err := closeFDs(cfg.StatusFD + 1); err != nil {
		return fmt.Errorf("close inherited fds: %w", err)
	}
	// Wait until Start has put us into our cgroup.
	// With a rootfs the release carries its directory's fd.
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace((2+maxVolumes)*4))
	n, oobn, _, _, err := unix.Recvmsg(cfg.SyncFD, b[:], oob, unix.MSG_CMSG_CLOEXEC)
	for errors.Is(err, unix.EINTR) {
		n, oobn, _, _, err = unix.Recvmsg(cfg.SyncFD, b[:], oob, unix.MSG_CMSG_CLOEXEC)
	}
	if err != nil || n != 1 {
		return errors.New("parent went away before releasing the sandbox")
	}
	trace.Mark("stage 1: released")
	if earlyStart != nil {
		// Go's first process start probes pidfd support by forking a
		// child and waiting for it (os.checkPidfd): let that happen on
		// another thread while this one builds the root, not on the
		// early start's path (several ms on a busy host, where the
		// child waits for a CPU). The child only exits.
		go func() {
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				p.Release()
			}
		}()
	}
	if cfg.Network == NetworkTUN {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("loopback up: %w", err)
		}
		if err := childTUN(cfg); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	unix.Close(cfg.SyncFD)
	// The release carries, in this order, the rootfs's directory and (with
	// a root user) the binary, both opened in our mount namespace.
	want := len(cfg.Volumes)
	if cfg.Rootfs != "" {
		want++
	}
	if cfg.RootUser {
		want++
	}
	if want > 0 {
		fds, err := receivedFDs(oob[:oobn], want)
		if err != nil {
			return fmt.Errorf("setup fds: %w", err)
		}
		if cfg.Rootfs != "" {
			cfg.RootfsFD, fds = fds[0], fds[1:] // closed by setupRoot; close-on-exec meanwhile
		}
		cfg.VolumeFDs, fds = fds[:len(cfg.Volumes)], fds[len(cfg.Volumes):] // likewise
		if cfg.RootUser {
			cfg.SudoFD = fds[0] // closed by setupRootUser
		}
	}
	// The binary's fd must not reach stage 2 (and user code); exec through
	// /proc/self/fd/N still works with close-on-exec set. The status fd must
	// survive: stage 2 reports "ready" on it.
	unix.CloseOnExec(cfg.ExeFD)

	// Now that our cgroup is final, a new cgroup namespace rooted at it hides
	// the host's cgroup paths. unshare changes this thread only: in place,
	// every other thread joins the namespace (a process forked from one
	// would otherwise see the host's paths); where that can't be done
	// (cgo), the re-exec gives every thread of stage 2 this one's.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unshare cgroup namespace: %w", err)
	}
	if inPlace {
		ok, err := joinCgroupNSAllThreads()
		if err != nil {
			return err
		}
		inPlace = ok
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if cfg.Network == NetworkNone {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("loopback up: %w", err)
		}
	}
	trace.Mark("stage 1: namespaces set")
	if err := setupRoot(cfg); err != nil {
		return err
	}
	trace.Mark("stage 1: root built")
	if err := setRlimits(cfg); err != nil {
		return err
	}
	if err := os.Chdir("/home/user"); err != nil {
		return err
	}
	if cfg.RootUser {
		// Before the capabilities go: the broker is started as uid 0.
		if err := sudoOnPath(); err != nil {
			return err
		}
		if err := startRootBroker(cfg); err != nil {
			return err
		}
		if os.Getenv(gcAfterBrokerEnv) != "" {
			// A test's way to run the finalizers of whatever the broker's
			// start left unreachable before the re-exec needs its fds.
			gcNow()
		}
	}
	// This thread first, raw. In place it keeps CAP_SETPCAP in its
	// permitted and effective sets for now (only in those: its bounding,
	// inheritable and ambient sets are empty): the other threads' changes
	// (finishInPlace) still need it, as AllThreadsSyscall makes every change
	// on this thread too and wants the same result everywhere. The seccomp
	// filter and no_new_privs reach every thread at once (TSYNC). So the
	// early start, which forks from this thread, needn't wait for the other
	// threads' ~45 changes (each a stop of the world and a signal to every
	// thread: ~60 us), which then overlap its start; what it starts execs as
	// the sandbox's user with empty bounding, inheritable and ambient sets,
	// so it has no capability from its exec on (and runs only the runtime's
	// fork code before it).
	if err := dropPrivileges(thisThread, inPlace); err != nil {
		return err
	}
	trace.Mark("stage 1: privileges dropped")
	if err := loadSeccomp(inPlace); err != nil {
		return err
	}
	if inPlace {
		trace.Mark("stage 1: seccomp loaded, in place")
		return finishInPlace(cfg)
	}
	trace.Mark("stage 1: seccomp loaded, re-exec")
	// Until the re-exec only this thread is hardened: the others still hold
	// every capability in the sandbox's user namespace and have no seccomp
	// filter. What the early start starts is the sandbox's code (the
	// kernel; an environment's python is the environment's own), the same
	// user, and /proc/PID/mem checks it against this thread, which has no
	// capability more than it: it could open our memory, shared with those
	// threads, and write into it (TestEarlyStartCantReachStage1). Not
	// dumpable, our /proc files need CAP_SYS_PTRACE in the sandbox's user
	// namespace, which nothing of the user's has. Only here: the broker's
	// start above writes its child's id maps, which a not-dumpable child
	// (it inherits the flag) would not allow; the re-exec makes stage 2
	// dumpable again, as an exec with unchanged credentials does.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("not dumpable: %w", err)
	}

	// Stage 2's environment as it is now: an early start may change ours.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envKey+"=") {
			env = append(env, kv)
		}
	}
	var keep []*os.File
	if earlyStart != nil {
		if cfg.Early, keep, err = runEarlyStart(true); err != nil {
			return err
		}
	}
	cfg.Stage = 2
	// The host path of the rootfs is none of the sandbox's business; stage
	// 1's own binary is closed by the exec.
	cfg.Rootfs, cfg.InitFD = "", 0
	j, _ := json.Marshal(cfg)
	env = append([]string{envKey + "=" + string(j)}, env...)
	exe := "/proc/self/fd/" + strconv.Itoa(cfg.ExeFD)
	err = unix.Exec(exe, os.Args, env)
	// Reachable until the exec: their finalizers would close the fds.
	runtime.KeepAlive(keep)
	return fmt.Errorf("re-exec %s: %w", exe, err)
}

// finishInPlace ends stage 1 hardened in place: it does what the re-exec
// would have done to the process, so that it goes on as stage 2.
func finishInPlace(cfg *childConfig) error {
	// The host-side config (cfg.Rootfs, a host path) is none of the
	// sandbox's business: wipe it where the kernel keeps the initial
	// environment (/proc/self/environ), which a re-exec would have
	// replaced. (Go's own copies are gone with Unsetenv; the heap may
	// still hold unreferenced copies until reused.) Before the early
	// start: it needs /proc/self/mem, which the next step closes.
	if err := wipeInitialEnv(envKey); err != nil {
		return err
	}
	// Not dumpable from here on, for good (no exec follows to change it):
	// what the early start starts is the sandbox's code, the same user,
	// and every thread but this one keeps its capabilities until
	// dropCapabilities below (as the re-exec path, see stage1). Without
	// this, our /proc files (mem, fd, environ) would be open to it from
	// the moment this thread drops its last capability.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("not dumpable: %w", err)
	}
	// Stage 2's environment as it is now (an early start may change
	// ours), without the config.
	env := os.Environ()
	if earlyStart != nil {
		var err error
		if cfg.Early, earlyKeep, err = runEarlyStart(false); err != nil {
			return err
		}
	}
	// Every thread (this one's CAP_SETPCAP too) as this one.
	if err := dropCapabilities(allThreads, false); err != nil {
		return err
	}
	trace.Mark("stage 1: every thread hardened")
	os.Clearenv()
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != envKey {
			os.Setenv(k, v)
		}
	}
	// What the exec would have closed (close-on-exec): the binary's fd
	// (the broker started with a copy of its own). The sync fd is closed
	// already, the setup's fds were close-on-exec and are closed too, and
	// what was inherited from the caller was closed at the start.
	unix.Close(cfg.ExeFD)
	cfg.Stage = 2
	cfg.Rootfs = ""
	return nil
}
