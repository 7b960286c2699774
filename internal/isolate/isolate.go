//go:build linux

// Package isolate starts a process inside an isolated Linux sandbox without
// any daemon — a very small runc. It implements the "local variant" of
// DESIGN.md §5 and the in-sandbox contract of §4.
//
// The sandbox's init is the calling binary itself, re-executed. Usage:
//
//	func main() {
//		if isolate.IsChild() {
//			if err := isolate.Child(); err != nil { // never returns on setup failure
//				log.Fatal(err)
//			}
//			runAgent() // sandboxed: uid 1000/gid 100, no caps, seccomp, rlimits
//			return
//		}
//		p, err := isolate.Start(ctx, isolate.Spec{Path: "/proc/self/exe", Args: os.Args, ...})
//		...
//	}
//
// How it works (see child.go for the in-sandbox half):
//
//  1. Start opens the binary, creates the cgroup (v1 or v2, detected) and
//     clones it into new user, mount, pid, ipc, uts (and net unless
//     Network=="all") namespaces with all capabilities kept as ambient
//     capabilities so that they survive the execve of a non-root uid. The
//     clone is born in its cgroup (v2: CLONE_INTO_CGROUP; v1: from a
//     thread moved there for the clone); on older kernels it is moved in
//     before its release.
//  2. Stage 1 of Child() blocks on a sync socket until the parent releases
//     it (with Spec.Rootfs, handing it the rootfs's fd),
//     then unshares the cgroup namespace (so the sandbox sees its own cgroup
//     as "/"), builds a tmpfs root with read-only binds of the host's system
//     directories (or of the entries of Spec.Rootfs), pivots into it, brings
//     loopback up, applies rlimits, drops every capability, sets
//     no_new_privs, installs the seccomp filter and re-executes the binary
//     once more.
//  3. Stage 2 of Child() (the fresh, single-image process) reports "ready"
//     through a status pipe and returns. Start returns at that point.
//
// The re-exec in step 2 exists because namespace, capability, no_new_privs and
// seccomp changes made with unshare/capset/prctl only affect the calling
// thread, and a Go program always has several threads. Doing them on one
// locked thread and then calling execve from that thread yields a process in
// which every thread (and every future child) has the final state.
package isolate

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/pidwait"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// Process is a started sandbox.
type Process struct {
	Pid int    // host pid of the sandbox's init
	ID  string // random id, also the name of the sandbox's cgroup

	cmd *exec.Cmd
	cg  *cgroup // nil when running without a cgroup

	waitOnce sync.Once
	waitInfo ExitInfo
	waitErr  error

	cleanupMu sync.Mutex

	// TUN is the host end of the sandbox's tun0 with Spec.Network
	// NetworkTUN (nil otherwise); the caller owns it.
	TUN *os.File
}

// CgroupDirs returns the sandbox's cgroup directories (one for v2, one per
// controller for v1); empty when it runs without a cgroup.
func (p *Process) CgroupDirs() []string {
	if p.cg == nil {
		return nil
	}
	return append([]string(nil), p.cg.dirs...)
}

// envKey carries the child configuration; its presence marks the child.
const envKey = "_CODE_SANDBOXES_ISOLATE"

// IsRootBroker reports whether this process is a sandbox's root broker
// (stages 3 and 4 of a child, which Child runs and never returns from), so
// that its caller can name it before it gets there.
func IsRootBroker() bool {
	raw, ok := os.LookupEnv(envKey)
	if !ok {
		return false
	}
	var c struct {
		Stage int `json:"stage"`
	}
	return json.Unmarshal([]byte(raw), &c) == nil && (c.Stage == 3 || c.Stage == 4)
}

// childConfig is passed from Start to Child (JSON in envKey).
type childConfig struct {
	Stage    int `json:"stage"` // 1: setup, 2: sandboxed
	ExeFD    int `json:"exe"`
	SyncFD   int `json:"sync"`
	StatusFD int `json:"status"`
	// InitFD is Spec.Init's fd stage 1 was executed from (0 = none:
	// it was ExeFD's binary). Stage 1 then always re-executes.
	InitFD int `json:"init,omitempty"`
	// BrokerFD, in stage 2 with a root user, is the root broker's status
	// pipe (startRootBroker); -1 or 0 = none.
	BrokerFD int `json:"broker,omitempty"`
	// BrokerPid, in stage 2 with a root user, is the broker's pid: stage
	// 1 leaves it stopped (SIGSTOP) for stage 2 to release (SIGCONT).
	BrokerPid int    `json:"broker_pid,omitempty"`
	Hostname  string `json:"hostname"`
	Network   string `json:"network"`
	HomeSize  int64  `json:"home"`
	FilesSize int64  `json:"files"`
	TmpSize   int64  `json:"tmp"`
	RootSize  int64  `json:"root"`
	NoFile    uint64 `json:"nofile"`
	FSize     int64  `json:"fsize"`
	// Rootfs is Spec.Rootfs ("" = the host's directories), for messages:
	// the child gets the directory as an fd with the release on the sync
	// socket, and RootfsFD is where it received it.
	Rootfs   string `json:"rootfs,omitempty"`
	RootfsFD int    `json:"-"`
	// Volumes are Spec.Volumes; the child gets each source as an fd with
	// the release (after the rootfs's), VolumeFDs.
	Volumes   []Bind `json:"volumes,omitempty"`
	VolumeFDs []int  `json:"-"`
	// TUNByChild: with NetworkTUN, the init creates the device itself and
	// sends its fd back (unprivileged callers; see tun.go).
	TUNByChild bool `json:"tun_by_child,omitempty"`
	// RootUser: uid 0 is mapped (Spec.HostRootUID); stage 1 starts the
	// root broker (rootuser.go).
	RootUser bool `json:"root_user,omitempty"`
	// SudoFD is where stage 1 received the binary, opened in its mount
	// namespace, to bind as sudo.
	SudoFD int `json:"-"`
	// Early, in stage 2, is what stage 1's SetEarlyStart function
	// returned (child.go).
	Early string `json:"early,omitempty"`
}

// Start starts a sandbox and returns once its init has finished the setup
// (Child returned in it). ctx bounds only the setup: the sandbox outlives
// ctx and the calling process (there is no parent-death signal).
func Start(ctx context.Context, spec Spec) (p *Process, err error) {
	switch spec.Network {
	case "":
		spec.Network = NetworkNone
	case NetworkNone, NetworkAll, NetworkTUN:
	default:
		return nil, fmt.Errorf("isolate: unknown network mode %q (want %q, %q or %q)", spec.Network, NetworkNone, NetworkTUN, NetworkAll)
	}
	if spec.MemoryBytes < 0 || spec.CPUs < 0 || spec.Pids < 0 || spec.HomeSizeBytes < 0 || spec.TmpSizeBytes < 0 || spec.FilesSizeBytes < 0 || spec.RootSizeBytes < 0 {
		return nil, errors.New("isolate: negative limit")
	}
	if spec.Path == "" {
		spec.Path = "/proc/self/exe"
	}
	if len(spec.Args) == 0 {
		spec.Args = []string{spec.Path}
	}
	if spec.Hostname == "" {
		spec.Hostname = "sandbox"
	}
	cfg := childConfig{
		Stage:     1,
		Hostname:  spec.Hostname,
		Network:   spec.Network,
		HomeSize:  orDefault(spec.HomeSizeBytes, TmpfsSize(DefaultHomeSize, spec.MemoryBytes)),
		FilesSize: orDefault(spec.FilesSizeBytes, TmpfsSize(DefaultFilesSize, spec.MemoryBytes)),
		TmpSize:   orDefault(spec.TmpSizeBytes, TmpfsSize(DefaultTmpSize, spec.MemoryBytes)),
		RootSize:  orDefault(spec.RootSizeBytes, TmpfsSize(DefaultRootSize, spec.MemoryBytes)),
		NoFile:    DefaultNoFile,
	}
	// RLIMIT_FSIZE: no single file can be larger than the largest writable
	// filesystem anyway; the limit turns "disk full" surprises in one mount
	// into a clean EFBIG/SIGXFSZ, and caps files written to /dev/shm.
	cfg.FSize = max(cfg.HomeSize, cfg.FilesSize, cfg.TmpSize, cfg.RootSize)

	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, err
	}
	id := hex.EncodeToString(idb[:])

	// The binary is opened here and executed through /proc/self/fd/N in the
	// child: as root the child runs as an unprivileged host uid that may not
	// be able to traverse the binary's directory (go test's 0700 temp dirs).
	exe, err := os.Open(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("isolate: open init binary: %w", err)
	}
	defer exe.Close()
	// What the sandbox executes: the binary, or its execute-only copy
	// (execonly.go).
	run := exe
	if spec.ExecOnlyDir != "" {
		if run, err = execOnlyCopy(spec.ExecOnlyDir, exe); err != nil {
			return nil, fmt.Errorf("isolate: execute-only copy of the init binary in %s (a directory only this user can write to, on a filesystem that allows exec): %w", spec.ExecOnlyDir, err)
		}
		defer run.Close()
	}
	// Stage 1's own binary (Spec.Init), copied the same way.
	initRun := spec.Init
	if initRun != nil && spec.ExecOnlyDir != "" {
		if initRun, err = execOnlyCopy(spec.ExecOnlyDir, spec.Init); err != nil {
			return nil, fmt.Errorf("isolate: execute-only copy of stage 1's binary %s in %s (a directory only this user can write to, on a filesystem that allows exec): %w", spec.Init.Name(), spec.ExecOnlyDir, err)
		}
		defer initRun.Close()
	}
	// The rootfs is validated and opened here (again through the child's
	// mount namespace below, for the same reason as the binary).
	var rootfs *os.File
	if spec.Rootfs != "" {
		if rootfs, err = openRootfs(spec.Rootfs); err != nil {
			return nil, err
		}
		defer rootfs.Close()
		cfg.Rootfs = rootfs.Name()
		if err := checkInterpreter(exe, spec.Path, rootfs); err != nil {
			return nil, err
		}
	}
	// Volumes' sources are opened here, as the rootfs is (the child's host
	// uid may not traverse their paths).
	if len(spec.Volumes) > maxVolumes {
		return nil, fmt.Errorf("isolate: %d volumes; at most %d", len(spec.Volumes), maxVolumes)
	}
	var volumes []*os.File
	defer func() {
		for _, f := range volumes {
			f.Close()
		}
	}()
	for _, v := range spec.Volumes {
		f, err := openVolume(v)
		if err != nil {
			return nil, err
		}
		volumes = append(volumes, f)
	}
	cfg.Volumes = spec.Volumes
	// The sync channel is a socket pair rather than a pipe: the release
	// carries the rootfs fd (SCM_RIGHTS).
	syncR, syncW, err := socketPair()
	if err != nil {
		return nil, err
	}
	defer syncR.Close()
	defer syncW.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statR.Close()
	defer statW.Close()

	trace.Mark("isolate: prepared")
	fsys, ferr := detectCgroups()
	if testCgroups != nil {
		fsys, ferr = *testCgroups, nil
	}
	cg, err := newCgroup(fsys, ferr, id, limits{memory: spec.MemoryBytes, cpus: spec.CPUs, pids: spec.Pids})
	if err != nil {
		return nil, fmt.Errorf("isolate: %w", err)
	}
	defer func() {
		if err != nil && cg != nil {
			cg.remove()
		}
	}()
	trace.Mark("isolate: cgroup created")
	// The init is born in its cgroup, limits written: accounted and limited
	// from its first instruction, with nothing to move after the clone.
	// On v2 it is cloned into it (CLONE_INTO_CGROUP); on v1 the thread
	// that clones is moved into it first (bornIn). Otherwise (kernels
	// before 5.7 on v2 and 6.1 on v1, see there) it is moved in after
	// the clone, while it waits for its release on the sync socket.
	into := -1
	var bornIn *threadCgroups
	if cg != nil && cg.v2 {
		if into, err = unix.Open(cg.dirs[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return nil, fmt.Errorf("isolate: open cgroup %s: %w", cg.dirs[0], err)
		}
		defer unix.Close(into)
	} else if cg != nil && cheapThreadMove() {
		bornIn = &threadCgroups{}
		for ctl, d := range cg.ctrl {
			bornIn.to = append(bornIn.to, d)
			bornIn.back = append(bornIn.back, fsys.v1[ctl])
		}
	}

	root := os.Geteuid() == 0
	cfg.TUNByChild = spec.Network == NetworkTUN && !root
	n := len(spec.ExtraFiles)
	cfg.ExeFD, cfg.SyncFD, cfg.StatusFD = 3+n, 4+n, 5+n
	// What the clone executes: the binary, or stage 1's own after the
	// status fd (stage 1 makes every fd from there close-on-exec, and
	// re-executes).
	startFD, passed := cfg.ExeFD, []*os.File{run, syncR, statW}
	if initRun != nil {
		cfg.InitFD = 6 + n
		startFD, passed = cfg.InitFD, append(passed, initRun)
	}

	hostUID, hostGID := os.Geteuid(), os.Getegid()
	if root {
		hostUID, hostGID = RootModeHostUID, RootModeHostGID
		if spec.HostUID > 0 && spec.HostGID > 0 {
			hostUID, hostGID = spec.HostUID, spec.HostGID
		}
	}
	uidMap := []syscall.SysProcIDMap{{ContainerID: SandboxUID, HostID: hostUID, Size: 1}}
	gidMap := []syscall.SysProcIDMap{{ContainerID: SandboxGID, HostID: hostGID, Size: 1}}
	if spec.HostRootUID > 0 || spec.HostRootGID > 0 {
		switch {
		case !root:
			return nil, errors.New("isolate: a root user in the sandbox (Spec.HostRootUID) needs a root caller: an unprivileged one can map only its own uid")
		case spec.HostRootUID <= 0 || spec.HostRootGID <= 0 || spec.HostRootUID == hostUID || spec.HostRootGID == hostGID:
			return nil, fmt.Errorf("isolate: HostRootUID/GID %d/%d must both be set, and differ from the user's %d/%d", spec.HostRootUID, spec.HostRootGID, hostUID, hostGID)
		}
		// Not as 0: see rootuser.go.
		uidMap = append(uidMap, syscall.SysProcIDMap{ContainerID: RootOuterUID, HostID: spec.HostRootUID, Size: 1})
		gidMap = append(gidMap, syscall.SysProcIDMap{ContainerID: RootOuterGID, HostID: spec.HostRootGID, Size: 1})
		cfg.RootUser = true
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if spec.Network != NetworkAll {
		flags |= unix.CLONE_NEWNET
	}
	// All capabilities as ambient caps: the child execs as uid 1000 and would
	// otherwise lose the (namespaced) capabilities it needs for the setup.
	// Child drops them all before any user code runs.
	var ambient []uintptr
	for c := 0; c <= LastCap(); c++ {
		ambient = append(ambient, uintptr(c))
	}
	newCmd := func(into int) *exec.Cmd {
		return &exec.Cmd{
			Path:       fmt.Sprintf("/proc/self/fd/%d", startFD),
			Args:       spec.Args,
			Env:        append(append([]string(nil), spec.Env...), envKey+"="+string(cfgJSON)),
			Stdout:     spec.Stdout,
			Stderr:     spec.Stderr,
			Dir:        "/",
			ExtraFiles: append(append([]*os.File(nil), spec.ExtraFiles...), passed...),
			SysProcAttr: &syscall.SysProcAttr{
				Cloneflags:  flags,
				UidMappings: uidMap,
				GidMappings: gidMap,
				// Unprivileged gid_map writes require setgroups to be denied;
				// as root we allow it so the credential below can drop root's
				// supplementary groups.
				GidMappingsEnableSetgroups: root,
				// As root the child's host uid 0 is unmapped in the new
				// namespace; setuid/setgid turn it into 1000/100 (=
				// RootModeHost*). Unprivileged it is 1000/100 already.
				Credential:  &syscall.Credential{Uid: SandboxUID, Gid: SandboxGID, NoSetGroups: !root},
				AmbientCaps: ambient,
				// Own session: terminal signals for the caller's job must not
				// reach the sandbox, which outlives its creator.
				Setsid: true,
				// A v2 cgroup to be born in (above).
				UseCgroupFD: into >= 0,
				CgroupFD:    into,
			},
		}
	}
	cmd := newCmd(into)
	owner := 0
	if root {
		// The sandbox's user namespace owned by its host uid, not root
		// (owner.go: per-user counts charged to the owner).
		owner = hostUID
	}
	inCgroup, err := startOnThread(cmd, owner, bornIn)
	if err != nil && into >= 0 && (errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.E2BIG) || errors.Is(err, unix.EINVAL)) {
		// A kernel without clone3 (before 5.3) or CLONE_INTO_CGROUP
		// (before 5.7): clone, then move the init in (below).
		into = -1
		cmd = newCmd(into)
		inCgroup, err = startOnThread(cmd, owner, nil)
	}
	if err != nil {
		if serr := CheckSupport(); serr != nil {
			return nil, fmt.Errorf("isolate: start sandbox: %w (%v)", err, serr)
		}
		return nil, fmt.Errorf("isolate: start sandbox: %w", err)
	}
	inCgroup = inCgroup || into >= 0
	trace.Mark("isolate: cloned")
	p = &Process{Pid: cmd.Process.Pid, ID: id, cmd: cmd, cg: cg}
	if testHookCloned != nil {
		testHookCloned(p)
	}
	// With a root user the child binds the binary as sudo: the source of a
	// bind must be opened in its own mount namespace (as the rootfs is).
	exeInChild := -1
	if cfg.RootUser {
		if exeInChild, err = reopenFileInChild(p.Pid, run); err != nil {
			exe.Close()
			run.Close()
			syncR.Close()
			statW.Close()
			p.Kill()
			p.Wait()
			p.Cleanup()
			return nil, fmt.Errorf("isolate: root user: %w", err)
		}
		defer unix.Close(exeInChild)
		trace.Mark("isolate: root user's binary reopened")
	}
	// The child's copies; closing ours makes EOF on statR mean "child gone".
	syncR.Close()
	statW.Close()
	exe.Close()
	run.Close()
	fail := func(e error) (*Process, error) {
		if p.TUN != nil {
			p.TUN.Close()
		}
		p.Kill()
		p.Wait()
		p.Cleanup()
		return nil, e
	}

	if cg != nil && !inCgroup {
		if err := cg.add(p.Pid); err != nil {
			return fail(fmt.Errorf("isolate: %w", err))
		}
		trace.Mark("isolate: added to cgroup")
	}
	if testHookRelease != nil {
		testHookRelease(p)
	}
	// Only now may the child proceed: everything it does from here on is
	// accounted and limited by its cgroup.
	// The release carries the rootfs's directory and the binary for sudo
	// (in that order, each when needed: stage1 takes them so).
	var fds []int
	if rootfs != nil {
		fd, err := reopenInChild(p.Pid, rootfs)
		if err != nil {
			return fail(fmt.Errorf("isolate: %w", err))
		}
		fds = append(fds, fd)
		defer unix.Close(fd)
		trace.Mark("isolate: rootfs reopened")
	}
	for _, f := range volumes {
		fd, err := reopenInChild(p.Pid, f)
		if err != nil {
			return fail(fmt.Errorf("isolate: volume: %w", err))
		}
		fds = append(fds, fd)
		defer unix.Close(fd)
	}
	if exeInChild >= 0 {
		fds = append(fds, exeInChild)
	}
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	if spec.Network == NetworkTUN && root {
		if p.TUN, err = tunCreateIn(p.Pid); err != nil {
			return fail(fmt.Errorf("isolate: network: %w", err))
		}
	}
	if err := unix.Sendmsg(int(syncW.Fd()), []byte{'G'}, rights, nil, unix.MSG_NOSIGNAL); err != nil {
		// EPIPE (ECONNRESET): the init is already gone.
		p.Kill()
		info, _ := p.Wait()
		p.Cleanup()
		if p.TUN != nil {
			p.TUN.Close()
		}
		return nil, fmt.Errorf("isolate: sandbox init exited before setup (%v); does %s call isolate.Child?", info, startName(spec))
	}
	if cfg.TUNByChild {
		// The init sends the device it created, or dies and reports why on
		// the status pipe (read below: EOF here is not the error to give).
		oob := make([]byte, unix.CmsgSpace(4))
		var b [1]byte
		n, oobn, _, _, err := unix.Recvmsg(int(syncW.Fd()), b[:], oob, unix.MSG_CMSG_CLOEXEC)
		for errors.Is(err, unix.EINTR) {
			n, oobn, _, _, err = unix.Recvmsg(int(syncW.Fd()), b[:], oob, unix.MSG_CMSG_CLOEXEC)
		}
		if err == nil && n == 1 {
			fd, err := receivedFD(oob[:oobn])
			if err != nil {
				return fail(fmt.Errorf("isolate: network: %w", err))
			}
			p.TUN = os.NewFile(uintptr(fd), "/dev/net/tun")
		}
	}
	syncW.Close()
	trace.Mark("isolate: released")

	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(statR)
		ch <- result{b, err}
	}()
	select {
	case <-ctx.Done():
		statR.Close()
		return fail(fmt.Errorf("isolate: sandbox setup: %w", ctx.Err()))
	case r := <-ch:
		status := string(bytes.TrimSpace(r.b))
		if status == "ready" {
			return p, nil
		}
		if msg, ok := strings.CutPrefix(status, "error: "); ok {
			e := fmt.Errorf("isolate: sandbox setup: %s", msg)
			if serr := CheckSupport(); serr != nil && strings.Contains(msg, "permission") {
				e = fmt.Errorf("%w (%v)", e, serr)
			}
			return fail(e)
		}
		// EOF without a status: the init died (or the binary does not call
		// Child). Report how it ended.
		p.Kill()
		info, _ := p.Wait()
		p.Cleanup()
		hint := fmt.Sprintf("does %s call isolate.Child?", startName(spec))
		if spec.Rootfs != "" {
			// Stage 2 is the binary re-executed inside the rootfs, with the
			// rootfs's dynamic loader and C library.
			hint += fmt.Sprintf(" If it is dynamically linked, the C library of rootfs %s may be too old for it (the init's stderr says; a static binary, CGO_ENABLED=0, avoids this)", spec.Rootfs)
		}
		return nil, fmt.Errorf("isolate: sandbox init exited during setup (%v); %s", info, hint)
	}
}

// Test hooks: testCgroups replaces the detected cgroup hierarchies;
// testHookCloned runs right after the clone, testHookRelease right before
// the release.
var (
	testCgroups     *cgroupFS
	testHookRelease func(*Process)
	testHookCloned  func(*Process)
)

func orDefault(v, d int64) int64 {
	if v == 0 {
		return d
	}
	return v
}

// Wait waits for the sandbox's init to exit (only in the process that called
// Start) and reports how it ended, including OOM kills and pids-limit hits
// recorded by its cgroup. It may be called several times.
func (p *Process) Wait() (ExitInfo, error) {
	p.waitOnce.Do(func() {
		// The supervisor waits here for the sandbox's whole life: on the
		// poller (a pidfd), not with a thread blocked in waitid.
		pidwait.Exited(p.cmd.Process.Pid)
		err := p.cmd.Wait()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.waitErr = err
			return
		}
		ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
		p.waitInfo.ExitCode = ws.ExitStatus()
		if ws.Signaled() {
			p.waitInfo.Signal = ws.Signal()
			p.waitInfo.ExitCode = -1
		}
		if p.cg != nil {
			p.waitInfo.OOMKilled, p.waitInfo.PidsLimitHit = p.cg.events()
		}
	})
	return p.waitInfo, p.waitErr
}

// Kill SIGKILLs everything in the sandbox: the init (which takes its whole
// pid namespace with it) and, as a second line, every process in its cgroup.
// It does not wait; call Wait.
func (p *Process) Kill() error {
	var errs []error
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		errs = append(errs, err)
	}
	if p.cg != nil {
		if err := p.cg.killAll(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Cleanup removes the sandbox's cgroup directories, killing whatever is
// still in them. It is idempotent. Mounts need no cleanup: they live only in
// the sandbox's mount namespace and vanish with its last process.
func (p *Process) Cleanup() error {
	p.cleanupMu.Lock()
	defer p.cleanupMu.Unlock()
	if p.cg == nil {
		return nil
	}
	return p.cg.remove()
}

// LastCap is the highest capability number the kernel knows, found once per
// process. Every loop over the capabilities asks it, and it used to read
// /proc/sys/kernel/cap_last_cap on each iteration: 41 reads on a sandbox's
// start in the supervisor, and again in stage 1 (0.3 ms each time here).
var LastCap = sync.OnceValue(probeLastCap)

// probeLastCap asks the kernel: prctl(PR_CAPBSET_READ) refuses only a
// capability it does not know (EINVAL), and needs no file, no privilege
// and no /proc (stage 1 asks before its own is mounted). Where prctl
// itself is refused (a seccomp profile), the file answers.
func probeLastCap() int {
	read := func(c int) syscall.Errno {
		_, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_READ, uintptr(c), 0)
		return e
	}
	c := unix.CAP_LAST_CAP
	switch read(c) {
	case 0:
		for c < 63 && read(c+1) == 0 {
			c++
		}
		return c
	case unix.EINVAL:
		for c > 0 && read(c) == unix.EINVAL {
			c--
		}
		return c
	}
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		var n int
		if _, err := fmt.Sscan(string(b), &n); err == nil && n > 0 && n < 64 {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}

// ConfigShape is a value of the type Start hands each stage of the child
// (in JSON): binaries that run different stages of one sandbox
// (Spec.Init) must agree on it, and a caller that checks a binary's
// protocol describes it.
func ConfigShape() any { return childConfig{} }

// startName names the binary the clone executes, for messages.
func startName(spec Spec) string {
	if spec.Init != nil {
		return spec.Init.Name() + " (stage 1) or " + spec.Path
	}
	return spec.Path
}
