package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/agentconfig"
	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/egress"
	"github.com/code-sandboxes/code-sandboxes/internal/forward"
	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
	"github.com/code-sandboxes/code-sandboxes/internal/ids"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/pipinstall"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// Variant is the local variant.
type Variant struct{}

// Name implements driver.Variant.
func (Variant) Name() string { return "local" }

// Capabilities implements driver.Variant.
func (Variant) Capabilities() driver.Capabilities {
	return driver.Capabilities{Interrupt: true, Variables: true, Host: true, Commands: true, Files: true,
		Watch: true, SetTimeout: true, Networks: []string{"none", "all", "allowlist"}, Limits: true, Packages: true, IdleTimeout: true,
		Isolations: []string{IsolationGVisor}, Volumes: true}
}

// Environments implements driver.Variant: host, and the builds of the
// environment store.
func (Variant) Environments(ctx context.Context, spec driver.Spec) ([]driver.Environment, error) {
	return environments(spec.EnvironmentDir)
}

// Create implements driver.Variant.
func (v Variant) Create(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	trace.Mark("create: start")
	opts, err := optionsOf(spec)
	if err != nil {
		return nil, err
	}
	if spec.Snapshot != "" {
		// Everything but the name, tags and lifetime is the snapshot's.
		rt := runtimeDir(opts.RuntimeDir)
		if err := ensureRuntimeDir(rt); err != nil {
			return nil, err
		}
		return v.fork(ctx, spec, rt, opts.SandboxBinary)
	}
	if spec.Network == "" {
		spec.Network = "none"
	}
	if err := checkNetwork(spec.NetworkPolicy()); err != nil {
		return nil, err
	}
	for _, p := range spec.Packages {
		if p == "" || strings.HasPrefix(p, "-") || strings.ContainsAny(p, " \t\r\n\x00") {
			return nil, fmt.Errorf("%w: package %q: give a requirement such as name or name==1.2 (no options, no spaces)", sberr.ErrInvalidConfig, p)
		}
	}
	if len(spec.Packages) > 0 && spec.Network == "none" {
		return nil, fmt.Errorf("%w: Packages are pip-installed inside the sandbox, which needs network to reach the package index; set NetworkPolicy all (or use an environment that has them)", sberr.ErrInvalidConfig)
	}
	isolation, err := isolationOf(spec)
	if err != nil {
		return nil, err
	}
	if err := checkAutoPause(spec, isolation); err != nil {
		return nil, err
	}
	if err := checkVolumes(spec, isolation); err != nil {
		return nil, err
	}
	var runsc string
	if isolation == IsolationGVisor {
		if runsc, err = checkGVisor(); err != nil {
			return nil, err
		}
	} else if err := isolate.CheckSupport(); err != nil {
		return nil, err
	}
	// After the cheap checks: this may build the environment (first use of
	// a built-in one).
	senv, err := resolveEnvironment(ctx, spec)
	if err != nil {
		return nil, err
	}
	rt := runtimeDir(opts.RuntimeDir)
	if err := ensureRuntimeDir(rt); err != nil {
		return nil, err
	}
	if opts.HomeSize < 0 || (opts.HomeSize > 0 && spec.Memory() > 0 && opts.HomeSize > spec.Memory()/2) {
		return nil, fmt.Errorf("%w: local.Options.HomeSize %d: /home/user's pages count against the memory limit (%d): give at most half of it, or raise Memory", sberr.ErrInvalidConfig, opts.HomeSize, spec.Memory())
	}
	if opts.WarmPool < 0 {
		return nil, fmt.Errorf("%w: local.Options.WarmPool must be 0 or more, got %d", sberr.ErrInvalidConfig, opts.WarmPool)
	}
	if key, ok := poolKey(spec, opts, rt, senv); ok && opts.WarmPool > 0 {
		pspec := poolSpec(spec)
		pl := pools.get(key, opts.WarmPool, func(ctx context.Context, owner *os.File) (*instance, error) {
			return launch(ctx, pspec, opts, rt, senv, owner, isolation, runsc)
		})
		inst, err := pl.take(ctx, spec)
		if err != nil {
			return nil, err
		}
		if inst != nil {
			return inst, nil
		}
	}
	inst, err := launch(ctx, spec, opts, rt, senv, nil, isolation, runsc)
	if err != nil {
		return nil, err // not a nil *instance in a non-nil interface
	}
	return inst, nil
}

// launch starts a sandbox and returns once its agent answers. With owner (a
// warm-pool entry) the sandbox is marked as such in its record (List,
// Connect and Kill don't see it) and its supervisor ends it when owner's
// write end closes before a claim (see pool.go). isolation and runsc are
// isolationOf's and checkGVisor's answers for spec.
func launch(ctx context.Context, spec driver.Spec, opts Options, rt string, senv sandboxEnvironment, owner *os.File, isolation, runsc string) (*instance, error) {
	// What dead sandboxes left goes soon, not when someone lists; in the
	// background and at most every sweepEvery, as a sweep reads every
	// sandbox's record (with a thousand alive, tens of milliseconds that
	// each Create would pay).
	sweepSoon(rt)
	if err := checkRoom(); err != nil {
		return nil, fmt.Errorf("create local sandbox: %w", err)
	}
	id := ids.Sandbox('l')
	dir := filepath.Join(rt, dirName(id))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox directory: %w", err)
	}
	var hostUID int
	var err error
	if os.Geteuid() == 0 && isolation == "" {
		if hostUID, err = allocHostUID(rt, dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	workdir := spec.WorkingDir
	if workdir == "" {
		workdir = "/home/user"
	}
	now := time.Now()
	rec := record{ID: id, Name: spec.Name, Tags: spec.Tags, CreatedAt: now, EndAt: now.Add(spec.Lifetime),
		Token: ids.Token(24), Network: spec.Network, AllowedHosts: spec.AllowedHosts, AllowPrivate: spec.AllowPrivate, DeniedHosts: spec.DeniedHosts, Memory: spec.Memory(), CPUs: spec.CPUs, Pids: spec.PidsLimit(defaultPids),
		Environment: senv.Name, BuildID: senv.BuildID, HostUID: hostUID, NoRootUser: opts.NoRootUser, Isolation: isolation, Runsc: runsc, Pool: owner != nil}
	lifetime := spec.Lifetime
	if spec.AutoPause {
		rec.AutoPause, rec.Lifetime = true, spec.Lifetime
		lifetime += autoPauseSlack(rec.Memory) // the supervisor pauses it at EndAt
	}
	if owner != nil {
		// Until claimed, the pool (through owner) decides how long it lives;
		// the agent's own clock is only the backstop.
		lifetime = poolBackstop
		rec.EndAt = now.Add(lifetime)
	}
	// Python "" is python3 from the sandbox's PATH: the rootfs's with an
	// environment (the build's Env may set PATH).
	ss := shimSpec{Dir: dir, Record: rec, Rootfs: senv.Rootfs, Home: opts.HomeSize, Volumes: spec.Volumes, Agent: agentConfig{Base: agentconfig.Base{ID: id, Token: rec.Token, Python: opts.Python,
		Workdir: workdir, Env: mergeEnv(senv.Env, spec.Env), Lifetime: lifetime, IdleTimeout: spec.IdleTimeout,
		NoPrewarm: len(spec.Packages) > 0}}}
	if senv.Rootfs == "" {
		ss.KernelBytecode = kernelBytecodePath(opts.Python)
	}
	if isolation == "" {
		ss.ExecOnlyDir = execOnlyDir(rt)
	}
	exe, err := sandboxBinary(ctx, opts.SandboxBinary)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if isolation == IsolationGVisor {
		ss.Runsc, ss.Exe = runsc, exe
		ss.Record.Checkpoint = checkpointDirOf(id)
	} else if ss.Init, err = initBinary(ctx, exe); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b, _ := json.Marshal(ss)

	readyR, readyW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	env := shimEnv()
	trace.Mark("create: checks done, starting the supervisor")
	// A spare supervisor, started ahead, serves a cold Create (spare.go);
	// not a pool's, which hands its supervisor one more fd.
	var cmd *exec.Cmd
	var spare *spareShim
	if owner == nil {
		spare = takeSpare(exe, env)
	}
	if spare != nil {
		if err := spare.handOver(b, readyW); err == nil {
			cmd = spare.cmd // reaped already (reapLater)
			trace.Mark("create: spare supervisor given the spec")
		} else {
			spare.discard()
			spare = nil
		}
	}
	if cmd == nil {
		shimEnv := append(slices.Clip(env), shimSpecEnv+"="+string(b))
		files := []*os.File{readyW}
		if owner != nil {
			files = append(files, owner) // the shim's fd 4
			shimEnv = append(shimEnv, poolFDEnv+"=4")
		}
		if cmd, err = execShim(exe, dirName(id), shimEnv, files); err != nil {
			readyR.Close()
			readyW.Close()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("start sandbox supervisor: %w", whyNoStart(err))
		}
	}
	readyW.Close()

	trace.Mark("create: supervisor started")
	rep, err := readReport(ctx, readyR)
	readyR.Close()
	trace.Mark("create: supervisor reported")
	if owner == nil && err == nil && rep.OK {
		afterCreate(exe, env, spare != nil)
	}
	if err != nil || !rep.OK {
		stopSupervisor(cmd, dir, stopGrace) // it removes dir once the supervisor is gone
		if err == nil {
			err = errors.New(rep.Error)
			if strings.Contains(rep.Error, homeseed.TooBig) {
				err = fmt.Errorf("%w: %s", sberr.ErrInvalidConfig, rep.Error)
			}
			if strings.Contains(rep.Error, "cgroup") && (spec.MemoryBytes == 0 || spec.Pids == 0) {
				err = fmt.Errorf("%w (the default limits, memory %d MiB and pids %d, need a writable cgroup like any other; to run without them ask for Memory and Pids Unlimited (-1), --memory unlimited --pids unlimited in the CLI)", err, driver.DefaultMemoryBytes>>20, defaultPids)
			}
		}
		return nil, fmt.Errorf("create local sandbox: %w", whyNoStart(err))
	}
	inst := newInstance(rt, id, rec.Token)
	if err := inst.waitHealthy(ctx, 30*time.Second); err != nil {
		log := tail(filepath.Join(dir, "agent.log"), 2048)
		_ = inst.Kill(context.Background())
		switch {
		case strings.Contains(log, homeseed.TooBig): // gVisor's agent seeds the home
			err = fmt.Errorf("%w: %s", sberr.ErrInvalidConfig, strings.TrimSpace(log))
		case log != "":
			err = fmt.Errorf("%w; agent log: %s", err, log)
		}
		return nil, fmt.Errorf("create local sandbox: %w", whyNoStart(err))
	}
	trace.Mark("create: healthy")
	if len(spec.Packages) > 0 {
		if err := pipinstall.Install(ctx, inst.c, opts.Python, spec.PackageIndex, spec.Packages, workdir); err != nil {
			_ = inst.Kill(context.Background())
			return nil, err
		}
	}
	return inst, nil
}

// checkRoom refuses a start that would run the host (or the creator's
// cgroup) out of process ids or memory: started anyway it would fail
// half-way with an error that doesn't say why, or leave the OOM killer to
// choose among what runs, and the sandboxes already running could no
// longer start commands. Retrying later (after others close) can work:
// ErrNoRoom.
func checkRoom() error {
	if err := isolate.CheckRoom(); err != nil {
		return fmt.Errorf("%w: %w", sberr.ErrNoRoom, err)
	}
	return nil
}

// whyNoStart adds to a failed start's error that the host is (nearly) out
// of process ids or memory, when it is: concurrent starts can all pass
// checkRoom and then run out together, and what fails then (a thread
// the Go runtime can't make, a fork) says nothing of the cause.
func whyNoStart(err error) error {
	if terr := isolate.RoomShortage(); terr != nil {
		return fmt.Errorf("%w (likely why, %w: %w)", err, sberr.ErrNoRoom, terr)
	}
	return err
}

// defaultPids keeps a fork bomb from taking the host down even when the user
// set no limit.
const defaultPids = 1024

// shimEnv is a supervisor's environment, without its spec.
func shimEnv() []string {
	return append(append(minimalHostEnv(), sandboxGoEnv...), roleEnv+"="+roleShim)
}

// execShim starts the sandbox binary exe as a supervisor, arg its
// argument (the sandbox directory's name, or a spare's placeholder), files
// its fds from 3 on, in a session of its own (terminal signals for the
// caller's job must not reach it), reaped if it dies while we still run:
// it outlives us.
func execShim(exe, arg string, env []string, files []*os.File) (*exec.Cmd, error) {
	cmd := exec.Command(exe)
	cmd.Args = []string{"code-sandboxes-shim", arg}
	cmd.Env = env
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	reapLater(cmd)
	return cmd, nil
}

func minimalHostEnv() []string {
	var out []string
	for _, k := range []string{"PATH", "HOME", "XDG_RUNTIME_DIR", "CODE_SANDBOXES_RUNTIME_DIR", dnsEnv, trace.Env, stateDirEnv, checkpointTimeoutEnv, EarlyKernelEnv, ReexecEnv, ShimStallEnv} {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// stopSupervisor ends a supervisor whose Create failed or gave up (its
// context cancelled, no report in time). SIGTERM: it may have started the
// sandbox already, which only it knows of, and it ends and cleans that up
// (it keeps a stop signal from before the sandbox's start). dir goes once
// the supervisor is gone (it removes dir itself on every path it controls):
// until then dir keeps the sandbox's host uid claimed and what it started
// findable. A supervisor still there after grace is hung: killed, and what
// its record names cleaned up. In the background: the caller's error
// doesn't wait.
func stopSupervisor(cmd *exec.Cmd, dir string, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		// The wait is reapLater's: poll for the end instead (Process
		// signals through a pidfd, so a reused pid is never hit).
		for end := time.Now().Add(grace); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if cmd.Process.Signal(syscall.Signal(0)) != nil {
				_ = os.RemoveAll(dir)
				return
			}
		}
		_ = cmd.Process.Kill()
		if r, err := readRecord(dir); err == nil {
			cleanupStale(dir, r)
		}
		_ = os.RemoveAll(dir)
	}()
}

// stopGrace is how long a supervisor told to stop may take to end the
// sandbox it started before it is killed.
const stopGrace = 10 * time.Second

func readReport(ctx context.Context, r io.Reader) (shimReport, error) {
	type res struct {
		rep shimReport
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var rep shimReport
		line, err := bufio.NewReader(io.LimitReader(r, 64<<10)).ReadBytes('\n')
		if err != nil && len(line) == 0 {
			ch <- res{err: fmt.Errorf("the sandbox supervisor exited without reporting: %w", err)}
			return
		}
		err = json.Unmarshal(line, &rep)
		ch <- res{rep, err}
	}()
	t := time.NewTimer(60 * time.Second)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.rep, r.err
	case <-ctx.Done():
		return shimReport{}, ctx.Err()
	case <-t.C:
		return shimReport{}, fmt.Errorf("%w: the sandbox supervisor did not report within 60s", sberr.ErrTimeout)
	}
}

func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, _ := f.Stat()
	if st != nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return strings.TrimSpace(string(b))
}

// instance is a handle on a local sandbox.
type instance struct {
	rt, id string
	c      *client.Client
	fw     forward.Set
}

func newInstance(rt, id, token string) *instance {
	sock := filepath.Join(rt, dirName(id), socketFile)
	c := client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: client.UnixHTTPClient(sock), Dial: client.UnixDial(sock), AccessToken: token})
	return &instance{rt: rt, id: id, c: c}
}

func (i *instance) dir() string { return filepath.Join(i.rt, dirName(i.id)) }

func (i *instance) waitHealthy(ctx context.Context, max time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	delay := 2 * time.Millisecond
	for {
		hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
		err := i.c.Health(hctx)
		hcancel()
		if err == nil {
			return nil
		}
		if _, serr := os.Stat(i.dir()); serr != nil {
			return fmt.Errorf("%w: the sandbox exited during start-up", sberr.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the sandbox did not answer within %s: %v", sberr.ErrTimeout, max, err)
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

func (i *instance) ID() string             { return i.id }
func (i *instance) Client() *client.Client { return i.c }

func (i *instance) record() (*record, error) {
	r, err := readRecord(i.dir())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("sandbox %s: %w (it expired or was killed)", i.id, sberr.ErrNotFound)
		}
		return nil, err
	}
	return r, nil
}

func (i *instance) Info(ctx context.Context) (driver.Info, error) {
	r, err := i.record()
	if err != nil {
		return driver.Info{}, err
	}
	return infoOf(r), nil
}

func infoOf(r *record) driver.Info {
	status := "running"
	switch {
	case r.paused():
		status = StatusPaused
	case !r.alive():
		status = "stopped"
	}
	end := r.EndAt
	if r.Paused {
		end = time.Now().Add(r.Remaining) // the clock is stopped
	}
	return driver.Info{ID: r.ID, Variant: "local", Name: r.Name, Tags: r.Tags, Status: status,
		CreatedAt: r.CreatedAt, EndAt: end, Memory: r.Memory, CPUs: r.CPUs, Network: r.Network,
		Environment: r.Environment, BuildID: r.BuildID, Isolation: r.Isolation}
}

func (i *instance) SetTimeout(ctx context.Context, d time.Duration) error {
	r, err := i.record()
	if err != nil {
		return err
	}
	if _, err := i.c.SetTimeout(ctx, agentTimeout(r, d)); err != nil {
		return err
	}
	r.EndAt = time.Now().Add(d)
	if err := writeRecord(i.dir(), r); err != nil {
		return err
	}
	if r.AutoPause {
		timeoutMoved(r)
	}
	return nil
}

// UpdateNetwork changes the policy of a running sandbox with network all or
// allowlist (its own network namespace cannot be added or removed later):
// the record says what the supervisor applies on SIGUSR1, for connections
// opened from then on.
func (i *instance) UpdateNetwork(ctx context.Context, np driver.NetworkPolicy) error {
	r, err := i.record()
	if err != nil {
		return err
	}
	if err := checkNetwork(np); err != nil {
		return err
	}
	if (r.Network == "none") != (np.Network == "none") {
		return fmt.Errorf("%w: sandbox %s was created with network %s; a running sandbox can switch between all and allowlist only (create a new one)", sberr.ErrNotSupported, r.ID, r.Network)
	}
	if np.Network == "none" {
		return nil
	}
	r.Network, r.AllowedHosts, r.AllowPrivate, r.DeniedHosts = np.Network, np.AllowedHosts, np.AllowPrivate, np.DeniedHosts
	if err := writeRecord(i.dir(), r); err != nil {
		return err
	}
	if !r.alive() {
		return fmt.Errorf("sandbox %s: %w", r.ID, sberr.ErrNotFound)
	}
	if err := syscall.Kill(r.ShimPid, syscall.SIGUSR1); err != nil {
		return err
	}
	// Return once the policy is in force, not merely asked for.
	if err := egress.WaitApplied(ctx, i.dir(), r.policy()); err != nil {
		return fmt.Errorf("%w: sandbox %s: %w", sberr.ErrUnavailable, r.ID, err)
	}
	return nil
}

// checkNetwork validates a network policy for the local variant.
func checkNetwork(np driver.NetworkPolicy) error {
	switch np.Network {
	case "none":
		if len(np.AllowedHosts) > 0 || len(np.DeniedHosts) > 0 || np.AllowPrivate {
			return fmt.Errorf("%w: allowed and denied hosts and private ranges need network all or allowlist", sberr.ErrInvalidConfig)
		}
		return nil
	case "all", "allowlist":
		if _, err := egress.Compile(egress.PolicyOf(np.Network, np.AllowedHosts, np.DeniedHosts, np.AllowPrivate)); err != nil {
			return fmt.Errorf("%w: %w", sberr.ErrInvalidConfig, err)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown network policy %q; use none, all or allowlist", sberr.ErrInvalidConfig, np.Network)
}

// policy is the record's network policy, as its supervisor applies it.
func (r record) policy() egress.Policy {
	return egress.PolicyOf(r.Network, r.AllowedHosts, r.DeniedHosts, r.AllowPrivate)
}

// Host forwards a loopback port of this process to port inside the sandbox,
// through the agent's socket: it works with network "none" too. The forward
// lives as long as this handle (Release or Close end it).
func (i *instance) Host(ctx context.Context, port int) (string, error) {
	return i.fw.Addr(port, i.c.DialPort)
}

func (i *instance) Kill(ctx context.Context) error {
	return killByDir(ctx, i.dir())
}

func (i *instance) Release() error {
	i.fw.Close()
	i.c.CloseIdleConnections()
	return nil
}

// killByDir ends the sandbox whose directory is dir and waits until its
// supervisor has cleaned up (bounded).
func killByDir(ctx context.Context, dir string) error {
	r, err := readRecord(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sandbox %s: %w (it expired or was killed)", filepath.Base(dir), sberr.ErrNotFound)
		}
		// A corrupt record: nothing to signal; remove the debris.
		return os.RemoveAll(dir)
	}
	if !r.alive() {
		cleanupStale(dir, r)
		return nil
	}
	_ = syscall.Kill(r.ShimPid, syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			// The supervisor removes the directory last, then exits: wait
			// for that too, so that nothing of the sandbox runs once Kill
			// (and Close) returned. On a loaded host the exit came after
			// the directory was gone (TestLocalScaleLeavesNothing saw it).
			waitEnded(r.ShimPid, r.ShimStart, deadline)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	// The shim did not finish in time: take everything down ourselves.
	_ = syscall.Kill(r.ShimPid, syscall.SIGKILL)
	cleanupStale(dir, r)
	return nil
}

// cleanupStale removes what a dead supervisor left: the agent if it somehow
// survived, its cgroups and the directory.
func cleanupStale(dir string, r *record) {
	if r.AgentPid > 0 {
		// Only signal it if it still is a sandbox agent of ours.
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(r.AgentPid) + "/cmdline"); err == nil && strings.HasPrefix(string(b), "code-sandboxes-agent") {
			_ = syscall.Kill(r.AgentPid, syscall.SIGKILL)
		}
	}
	if r.Isolation == IsolationGVisor {
		cleanupGVisor(context.Background(), dir, r)
		removeCheckpoint(r)
	}
	removeCgroups(r.Cgroups)
	_ = os.RemoveAll(dir)
}

// Connect implements driver.Variant.
func (v Variant) Connect(ctx context.Context, id string, spec driver.Spec) (driver.Instance, error) {
	opts, err := optionsOf(spec)
	if err != nil {
		return nil, err
	}
	rt := runtimeDir(opts.RuntimeDir)
	r, err := readRecord(filepath.Join(rt, dirName(id)))
	if err == nil && r.ID != id {
		err = os.ErrNotExist
	}
	if err == nil && r.paused() {
		// A handle on the checkpoint: Resume brings it back.
		return newInstance(rt, r.ID, r.Token), nil
	}
	if err != nil || !r.alive() || r.Pool {
		return nil, fmt.Errorf("sandbox %s: %w (it expired or was killed)", id, sberr.ErrNotFound)
	}
	inst := newInstance(rt, r.ID, r.Token)
	if err := inst.waitHealthy(ctx, 5*time.Second); err != nil {
		return nil, err
	}
	return inst, nil
}

// List implements driver.Variant. It only reads: a sandbox whose
// supervisor died is left out, and left for Sweep (which Create and Kill
// run) to clean up.
func (v Variant) List(ctx context.Context, spec driver.Spec, f driver.Filter) ([]driver.Info, error) {
	opts, err := optionsOf(spec)
	if err != nil {
		return nil, err
	}
	rt := runtimeDir(opts.RuntimeDir)
	ents, err := os.ReadDir(rt)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []driver.Info
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		r, err := readRecord(filepath.Join(rt, e.Name()))
		if err != nil || (!r.alive() && !r.Paused) || r.Pool {
			continue
		}
		if i := infoOf(r); f.Match(i) {
			out = append(out, i)
		}
	}
	return out, nil
}

// Sweep implements driver.Sweeper: it ends what a dead supervisor left (an
// agent that somehow survived, cgroups, the directory) and removes
// directories without a record older than a minute (debris of a Create
// that died; younger ones may be starting).
func (v Variant) Sweep(ctx context.Context, spec driver.Spec) (int, error) {
	opts, err := optionsOf(spec)
	if err != nil {
		return 0, err
	}
	return sweep(runtimeDir(opts.RuntimeDir))
}

// sweepEvery spaces the sweeps Create starts.
const sweepEvery = 10 * time.Second

var lastSweep sync.Map // runtime dir → *atomic.Int64, UnixNano of the last sweep Create started

func sweepSoon(rt string) {
	v, _ := lastSweep.LoadOrStore(rt, new(atomic.Int64))
	last := v.(*atomic.Int64)
	now, prev := time.Now().UnixNano(), last.Load()
	if now-prev < int64(sweepEvery) || !last.CompareAndSwap(prev, now) {
		return
	}
	go func() { _, _ = sweep(rt) }()
}

func sweep(rt string) (int, error) {
	ents, err := os.ReadDir(rt)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() || e.Name() == execOnlyDirName {
			continue
		}
		dir := filepath.Join(rt, e.Name())
		r, err := readRecord(dir)
		if err != nil {
			if st, serr := os.Stat(dir); serr == nil && time.Since(st.ModTime()) > time.Minute {
				_ = os.RemoveAll(dir)
				n++
			}
			continue
		}
		if !r.alive() && !r.Paused {
			cleanupStale(dir, r)
			n++
		}
	}
	return n, nil
}

// Kill implements driver.Variant; it sweeps the dead too.
func (v Variant) Kill(ctx context.Context, spec driver.Spec, id string) error {
	opts, err := optionsOf(spec)
	if err != nil {
		return err
	}
	rt := runtimeDir(opts.RuntimeDir)
	dir := filepath.Join(rt, dirName(id))
	if r, rerr := readRecord(dir); rerr == nil && r.Pool {
		return fmt.Errorf("sandbox %s: %w (it expired or was killed)", id, sberr.ErrNotFound)
	}
	err = killByDir(ctx, dir)
	_, _ = sweep(rt)
	return err
}

// removeCgroups kills whatever is left in a dead sandbox's cgroups and
// removes them (deepest first: rmdir fails on a cgroup with children).
func removeCgroups(dirs []string) {
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if !strings.HasPrefix(d, "/sys/fs/cgroup/") {
			continue // a corrupt or forged record must not make us remove other paths
		}
		if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		for try := 0; try < 50; try++ {
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
