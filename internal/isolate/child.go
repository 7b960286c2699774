//go:build linux

package isolate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
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

// cloexecFrom sets close-on-exec on every fd from first up.
func cloexecFrom(first int) error {
	err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return err
	}
	// Before Linux 5.11: one by one.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// Host directories bind-mounted read-only into the sandbox. Nothing else of
// the host is visible: no /home, /root, /tmp, /var, /run, /srv, /opt, /mnt,
// /media, nor the caller's working directory.
var systemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"}

// rootfsReserved are the top-level names of a rootfs that are not taken from
// it: the sandbox contract's own mounts replace proc, dev, tmp, home and
// files; the sandbox gets no /sys (as with the host's directories); .etc is
// writeEtcFiles' scratch directory.
var rootfsReserved = map[string]bool{"proc": true, "dev": true, "sys": true, "tmp": true, "home": true, "files": true, ".etc": true}

// maxRootfsEntries bounds the number of top-level entries (each one a mount)
// a rootfs may have; a real one has about twenty.
const maxRootfsEntries = 256

// setupRoot builds the new root on a tmpfs and pivots into it.
//
// The new root is always a small tmpfs of our own holding the mount points,
// whether its content comes from the host's system directories or from
// Spec.Rootfs. For a rootfs, every top-level entry (but the reserved ones) is
// bound read-only onto the tmpfs instead of binding the rootfs itself as the
// root: then the mount points /proc, /dev, /tmp, /home/user and /files need
// not exist in the rootfs (debootstrap and OCI images lack /files and
// /home/user) and nothing is ever created in it, and no mount lands on a path
// inside the rootfs, where a symlink planted in an image could redirect it.
func setupRoot(cfg *childConfig) error {
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// Any existing directory serves as mount point for the new root; the
	// host's /tmp is hidden by it only inside our mount namespace. The
	// rootfs, even when it lives under /tmp, stays reachable: we hold an fd.
	const nr = "/tmp"
	if err := mount("tmpfs", nr, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, rootTmpfsData(cfg.RootSize, cfg.RootUser)); err != nil {
		return err
	}
	// The rootfs's /home/user, opened before bindRootfs closes the rootfs:
	// the sandbox's home starts as a copy of it (package homeseed).
	homeSrc := -1
	if cfg.RootfsFD > 0 {
		var err error
		if homeSrc, err = homeseed.OpenRootfsHome(cfg.RootfsFD); err != nil {
			return err
		}
		if err := bindRootfs(nr, cfg); err != nil {
			if homeSrc >= 0 {
				unix.Close(homeSrc)
			}
			return err
		}
	} else {
		if err := bindHostDirs(nr); err != nil {
			return err
		}
	}
	if cfg.RootUser {
		if err := prepareRootUser(nr, cfg); err != nil {
			return err
		}
	}

	// /proc: a fresh instance for our pid namespace.
	if err := os.Mkdir(nr+"/proc", 0o555); err != nil {
		return err
	}
	if err := mount("proc", nr+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := setupDev(nr + "/dev"); err != nil {
		return err
	}
	for _, m := range []struct {
		path string
		mode string
		size int64
		user bool
	}{
		{"/tmp", "1777", cfg.TmpSize, false},
		{"/home/user", "0755", cfg.HomeSize, true},
		{"/files", "0755", cfg.FilesSize, true},
	} {
		dst := nr + m.path
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		data := fmt.Sprintf("mode=%s,size=%d,nr_inodes=%d", m.mode, m.size, TmpfsInodes(m.size))
		if m.user {
			data += fmt.Sprintf(",uid=%d,gid=%d", SandboxUID, SandboxGID)
		}
		if err := mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
			if homeSrc >= 0 {
				unix.Close(homeSrc)
			}
			return err
		}
		if m.path == "/home/user" && homeSrc >= 0 {
			// Closed by Copy: no fd outside the new root may outlive the
			// setup.
			err := homeseed.Copy(homeSrc, dst, homeseed.Limits{Bytes: m.size, Inodes: TmpfsInodes(m.size),
				Hint: HomeHint})
			homeSrc = -1
			if err != nil {
				return err
			}
		}
	}
	if err := bindVolumes(nr, cfg); err != nil {
		return err
	}
	// /var/tmp: programs expect it; it is the same size-limited /tmp. Without
	// a /var of the rootfs it is a symlink on our tmpfs; a rootfs's own
	// /var/tmp gets /tmp bound over it below.
	if _, err := os.Lstat(nr + "/var"); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(nr+"/var", 0o755); err != nil {
			return err
		}
		if err := os.Symlink("/tmp", nr+"/var/tmp"); err != nil {
			return err
		}
	}

	// pivot_root(".", ".") stacks the old root on top of the new one;
	// detaching it leaves only the new root (the runc idiom, which needs no
	// directory for the old root).
	if err := unix.Chdir(nr); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := writeEtcFiles(cfg); err != nil {
		return err
	}
	// Only a real directory (Lstat): a symlink there would make the bind land
	// elsewhere (harmlessly, we are inside the new root by now, but wrongly).
	if fi, err := os.Lstat("/var/tmp"); err == nil && fi.IsDir() {
		if err := mount("/tmp", "/var/tmp", "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	if err := maskProc(); err != nil {
		return err
	}
	// The root itself (the tmpfs with the mount points) stays writable:
	// see rootTmpfsData.
	return nil
}

// bindHostDirs fills the new root with the host's systemDirs.
func bindHostDirs(nr string) error {
	rootfd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /: %w", err)
	}
	defer unix.Close(rootfd)
	for _, d := range systemDirs {
		if err := bindEntry(rootfd, d, filepath.Join(nr, d)); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("/%s: %w", d, err)
		}
	}
	return nil
}

// bindRootfs fills the new root with the top-level entries of the rootfs
// whose directory Start opened for us (cfg.RootfsFD), read-only.
func bindRootfs(nr string, cfg *childConfig) error {
	// An fd of a directory outside the new root would let whoever holds it
	// walk out (openat(fd, "..")): closed as soon as the binds exist (and
	// received close-on-exec, in case of an early return).
	defer unix.Close(cfg.RootfsFD)
	dfd, err := unix.Openat(cfg.RootfsFD, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("rootfs %s: %w", cfg.Rootfs, err)
	}
	d := os.NewFile(uintptr(dfd), cfg.Rootfs)
	names, err := d.Readdirnames(maxRootfsEntries + 1)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("rootfs %s: list: %w", cfg.Rootfs, err)
	}
	if len(names) > maxRootfsEntries {
		return fmt.Errorf("rootfs %s: more than %d entries at the top", cfg.Rootfs, maxRootfsEntries)
	}
	sort.Strings(names)
	for _, name := range names {
		if rootfsReserved[name] || name == RootDir[1:] || (cfg.RootUser && name == RootHome[1:]) {
			continue
		}
		if err := bindEntry(cfg.RootfsFD, name, filepath.Join(nr, name)); err != nil {
			return fmt.Errorf("rootfs %s: /%s: %w", cfg.Rootfs, name, err)
		}
	}
	return nil
}

// bindEntry recreates the entry name of the directory dirfd at dst (on the
// new root's tmpfs): a directory or a regular file as a read-only recursive
// bind, a symlink as the same symlink (merged /usr: /bin -> usr/bin resolves
// inside the new root; a link pointing elsewhere simply dangles). Anything
// else (device nodes, fifos, sockets) is left out.
func bindEntry(dirfd int, name, dst string) error {
	// O_PATH|O_NOFOLLOW opens the entry itself, never what a symlink points
	// at; the bind below takes this fd as its source, so it binds exactly
	// what was checked here whatever happens to the path meanwhile.
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, name)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case unix.S_IFDIR:
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	case unix.S_IFREG:
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	default:
		return nil
	}
	if err := mount("/proc/self/fd/"+strconv.Itoa(fd), dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return remountTreeReadOnly(dst)
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", errors.New("symlink target too long")
	}
	return string(buf[:n]), nil
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", src, dst, fstype, err)
	}
	return nil
}

// remountTreeReadOnly makes dst and every mount below it read-only, nosuid
// and nodev. A bind remount inside a user namespace must keep the flags the
// host locked on the source mount (noexec, nodev, atime...), hence statfs.
func remountTreeReadOnly(dst string) error {
	for _, mp := range mountsUnder(dst) {
		var st unix.Statfs_t
		if err := unix.Statfs(mp, &st); err != nil {
			return fmt.Errorf("statfs %s: %w", mp, err)
		}
		keep := uintptr(st.Flags) & (unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
		flags := unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | keep
		if err := mount("", mp, "", flags, ""); err != nil {
			return err
		}
	}
	return nil
}

// mountsUnder lists dst and the mount points below it, parents first.
func mountsUnder(dst string) []string {
	out := []string{dst}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if strings.HasPrefix(mp, dst+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// setupDev creates a minimal /dev. Device nodes cannot be created in a user
// namespace, so the harmless ones are bind mounts of the host's.
func setupDev(dev string) error {
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	if err := mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, fmt.Sprintf("mode=0755,size=64k,nr_inodes=%d", DevInodes)); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p := filepath.Join(dev, n)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := mount("/dev/"+n, p, "", unix.MS_BIND, ""); err != nil {
			if n == "tty" {
				os.Remove(p) // no controlling-tty device on this host: fine
				continue
			}
			return err
		}
	}
	// A private devpts instance; gid=5 (tty) is not mapped, so no gid option.
	if err := os.Mkdir(dev+"/pts", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err == nil {
		if err := os.Symlink("pts/ptmx", dev+"/ptmx"); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dev+"/shm", 0o1777); err != nil {
		return err
	}
	if err := mount("tmpfs", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("mode=1777,size=64m,nr_inodes=%d", TmpfsInodes(64<<20))); err != nil {
		return err
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// writeEtcFiles overlays /etc/passwd, group, hostname and hosts (read-only
// binds) so that the sandbox user is "user" (1000) in group "users" (100)
// whatever the host's files say, and the hostname resolves.
func writeEtcFiles(cfg *childConfig) error {
	const scratch = "/.etc"
	if err := os.Mkdir(scratch, 0o755); err != nil {
		return err
	}
	if err := mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return err
	}
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			"user:x:1000:100:user:/home/user:/bin/bash\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group":    "root:x:0:\nusers:x:100:user\nnogroup:x:65534:\n",
		"hostname": cfg.Hostname + "\n",
		"hosts":    "127.0.0.1\tlocalhost " + cfg.Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
	if cfg.RootUser {
		// Root exists here (rootuser.go): a shell for sudo -i, and its name
		// for its ids as the sandbox's own namespace (the agent) sees them.
		files["passwd"] = strings.Replace(files["passwd"], "root:x:0:0:root:/root:/usr/sbin/nologin", "root:x:0:0:root:/root:/bin/bash", 1) +
			fmt.Sprintf("root:x:%d:%d:root:/root:/bin/bash\n", RootOuterUID, RootOuterGID)
		files["group"] += fmt.Sprintf("root:x:%d:\n", RootOuterGID)
	}
	if cfg.Network == NetworkTUN {
		// The user-space stack behind tun0 answers DNS on its gateway.
		files["resolv.conf"] = "nameserver " + TUNGatewayIPv4 + "\nnameserver " + TUNGatewayIPv6 + "\n"
	}
	for name, content := range files {
		dst := "/etc/" + name
		if _, err := os.Stat(dst); err != nil {
			continue // bind needs an existing file; /etc is read-only
		}
		src := scratch + "/" + name
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			return err
		}
		if err := mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		if err := mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
	// The binds keep the files alive; the scratch mount point goes away.
	if err := unix.Unmount(scratch, unix.MNT_DETACH); err != nil {
		return err
	}
	return os.Remove(scratch)
}

// maskProc hides and write-protects the same /proc paths as Docker's default
// (moby oci/defaults.go: MaskedPaths, ReadonlyPaths).
func maskProc() error {
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/acpi", "/proc/asound", "/proc/scsi"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			err = mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k")
		} else {
			err = mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return err
		}
	}
	for _, p := range []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		if err := mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
	return nil
}

// setRlimits applies the sandbox's rlimits (soft = hard, so they cannot be
// raised again without CAP_SYS_RESOURCE, which is about to go):
//   - RLIMIT_NOFILE 4096 (or the inherited hard limit if lower);
//   - RLIMIT_CORE 0: no core dumps filling the small tmpfs mounts;
//   - RLIMIT_FSIZE: the largest tmpfs size (no file can be bigger anyway).
//
// RLIMIT_NPROC is deliberately not set: it counts processes per host uid,
// which for unprivileged callers includes all of the caller's own processes.
// The pids cgroup limit is the right tool.
func setRlimits(cfg *childConfig) error {
	set := func(res int, v uint64) error {
		var cur unix.Rlimit
		if err := unix.Getrlimit(res, &cur); err == nil && cur.Max != unix.RLIM_INFINITY && cur.Max < v {
			v = cur.Max
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", res, err)
		}
		return nil
	}
	if err := set(unix.RLIMIT_NOFILE, cfg.NoFile); err != nil {
		return err
	}
	if err := set(unix.RLIMIT_CORE, 0); err != nil {
		return err
	}
	return set(unix.RLIMIT_FSIZE, uint64(cfg.FSize))
}

// Securebits (linux/securebits.h).
const (
	secbitNoroot                  = 1 << 0
	secbitNorootLocked            = 1 << 1
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// threadSys makes one per-thread change: on the calling thread only
// (thisThread: stage 1 and the broker's stage 3 then re-execute, and every
// thread of the new image is a copy of this one) or on every thread of the
// process (allThreads: hardened in place; it fails with ENOTSUP where the
// runtime can't, with cgo).
type threadSys func(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err syscall.Errno)

var (
	thisThread threadSys = syscall.RawSyscall6
	allThreads threadSys = syscall.AllThreadsSyscall6
)

// inPlaceByDefault: hardening in place is not the default. It saves the
// re-exec (a Go start of the binary: ~2 ms of CPU and ~950 page faults per
// sandbox with the broker's) but costs ~45 rounds of AllThreadsSyscall,
// each a stop of the world and a signal every thread must wake for: the
// bounding set alone is 41 (one prctl per capability, on every thread).
// That is ~60 us a round on an idle 2-core host and far more on a busy
// one, where each round waits for every thread to be scheduled; measured
// on a busy 2-core host it was no faster (bench -ab, same binary, B with
// ReexecEnv=1: B-A -2.8 ms per pair, B faster). Flip it where a
// measurement says otherwise.
const inPlaceByDefault = false

// wantInPlace reports whether to try hardening in place (ReexecEnv).
func wantInPlace() bool {
	switch os.Getenv(ReexecEnv) {
	case "":
		return inPlaceByDefault
	case "0":
		return true
	}
	return false
}

// joinCgroupNSAllThreads makes every thread join the calling thread's
// cgroup namespace (just unshared): setns on each, which for the caller
// itself is a no-op. It reports false, changing nothing, where the process
// can't change all its threads (then only a re-exec gives them all the
// namespace).
func joinCgroupNSAllThreads() (bool, error) {
	fd, err := unix.Open("/proc/thread-self/ns/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("cgroup namespace: %w", err)
	}
	defer unix.Close(fd)
	_, _, errno := allThreads(unix.SYS_SETNS, uintptr(fd), unix.CLONE_NEWCGROUP, 0, 0, 0, 0)
	switch errno {
	case 0:
		return true, nil
	case syscall.ENOTSUP:
		return false, nil
	}
	return false, fmt.Errorf("cgroup namespace: setns on every thread: %w", errno)
}

// dropPrivileges empties every capability set (dropCapabilities), then
// sets no_new_privs: no setuid/file-capability gains on exec ever again;
// it is also what allows an unprivileged seccomp filter.
func dropPrivileges(sys threadSys, keepSetpcap bool) error {
	if err := dropCapabilities(sys, keepSetpcap); err != nil {
		return err
	}
	if _, _, errno := sys(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("no_new_privs: %w", errno)
	}
	return nil
}

// dropCapabilities empties every capability set of the threads sys
// changes: bounding, ambient, inheritable, permitted, effective. With the
// bounding and inheritable sets empty no exec (file caps, setuid) can bring
// any back; the locked securebits additionally make "uid 0 inside" mean
// nothing. keepSetpcap leaves CAP_SETPCAP in the permitted and effective
// sets (only there), for changes still to come.
func dropCapabilities(sys threadSys, keepSetpcap bool) error {
	if _, _, errno := sys(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS,
		secbitNoroot|secbitNorootLocked|secbitKeepCapsLocked|secbitNoCapAmbientRaise|secbitNoCapAmbientRaiseLocked, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("securebits: %w", errno)
	}
	for c := 0; c <= LastCap(); c++ {
		if _, _, errno := sys(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0, 0); errno != 0 && errno != syscall.EINVAL {
			return fmt.Errorf("drop bounding cap %d: %w", c, errno)
		}
	}
	if _, _, errno := sys(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("clear ambient caps: %w", errno)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if keepSetpcap {
		data[0].Permitted = 1 << unix.CAP_SETPCAP
		data[0].Effective = 1 << unix.CAP_SETPCAP
	}
	_, _, errno := sys(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0, 0, 0, 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if errno != 0 {
		return fmt.Errorf("capset: %w", errno)
	}
	return nil
}

// closeInherited closes every fd from first up that lacks close-on-exec:
// those came from whatever started the process (what it opened itself
// since, the Go runtime's included, is close-on-exec).
func closeInherited(first int) error {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < first {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
	return nil
}
