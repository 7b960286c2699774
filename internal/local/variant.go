package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
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
