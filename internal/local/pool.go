package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
)

// A warm pool keeps sandboxes started ahead (supervisor, isolation, agent
// answering, default kernel up) for one shape of Create, and hands one out
// instead of starting a sandbox: the claim is a record update and one call
// to the agent, about a millisecond instead of a cold start.
//
// What makes a claimed sandbox indistinguishable from a cold one:
//   - Its id and token were minted when it started, like a cold one's, and
//     shown to nobody before the claim: the record (0600, in the runtime
//     directory) marks it Pool, so List, Connect and Kill by id don't see
//     it, and its id reaches the caller only with the claim.
//   - No code has run in it: the agent started the default kernel, which
//     executed nothing.
//   - An entry is taken out of the pool under its lock before the claim: it
//     serves one caller, or is discarded.
//   - Its limits, environment and network are the caller's, because only a
//     Create whose spec has exactly the pool's shape takes one (poolKey):
//     network none, no environment variables or packages, the default
//     working directory, and the same environment, memory, CPUs and pids
//     (each shape gets its own pool). Anything else starts cold. Name, tags,
//     lifetime and idle timeout are applied at the claim.
//
// Pools live in this process. A pool sandbox's supervisor holds the read end
// of a pipe whose write end only the pool holds: the claim writes
// poolClaimed and closes it, after which the sandbox is the caller's; if the
// write end closes without that (ClosePools, the process exiting or
// crashing), the supervisor ends the sandbox. Nothing outlives its pool.
const (
	poolFDEnv   = "CODE_SANDBOXES_POOL_FD"
	poolClaimed = 'c'
	// poolBackstop is an unclaimed sandbox's lifetime: its pool ends it
	// long before (this is for a supervisor that somehow missed it).
	poolBackstop = 7 * 24 * time.Hour
	// poolBackoffMax caps the wait between failed fills.
	poolBackoffMax = time.Minute
	// poolFillTimeout bounds one fill.
	poolFillTimeout = 2 * time.Minute
	// poolRefillDelay holds the refill back after a claim: starting a
	// sandbox takes a core for ~100 ms, and on a small machine that would
	// land on the claimer's first cell (measured: claim → first result
	// 3.8 ms p50 with the refill starting at once, at load 15).
	poolRefillDelay = 50 * time.Millisecond
)

// PoolStats counts warm-pool activity across this process's pools: the
// public local.PoolStats, field for field (documented there).
type PoolStats struct {
	Hits, Misses    int64
	Ready, Starting int
	Failures        int64
	LastError       string
}

var statHits, statMisses, statFailures atomic.Int64

// Stats returns the warm pools' counters.
func Stats() PoolStats {
	s := PoolStats{Hits: statHits.Load(), Misses: statMisses.Load(), Failures: statFailures.Load()}
	pools.mu.Lock()
	defer pools.mu.Unlock()
	for _, pl := range pools.m {
		pl.mu.Lock()
		s.Ready += len(pl.ready)
		s.Starting += pl.starting
		if pl.lastErr != nil {
			s.LastError = pl.lastErr.Error()
		}
		pl.mu.Unlock()
	}
	return s
}

// ClosePools stops every pool of this process and ends the sandboxes they
// hold, waiting until their supervisors have cleaned up (a fill under way
// is waited for and ended too), and ends its spare supervisors (spare.go).
// Claimed sandboxes are not touched.
func ClosePools(ctx context.Context) {
	closeSpares()
	defer WaitSpares() // one starting is ended once started
	pools.mu.Lock()
	all := pools.m
	pools.m = map[string]*pool{}
	pools.mu.Unlock()
	var wg sync.WaitGroup
	for _, pl := range all {
		for _, e := range pl.close() {
			wg.Go(func() { e.discard(ctx) })
		}
	}
	for _, pl := range all {
		pl.fills.Wait() // a fill that finds its pool closed discards its sandbox
	}
	wg.Wait()
}

// poolKey says whether a Create can be served from a pool, and which: the
// shape of the sandbox it asks for, everything that is fixed when a sandbox
// starts.
func poolKey(spec driver.Spec, opts Options, rt string, senv sandboxEnvironment) (string, bool) {
	if spec.Network != "none" || len(spec.AllowedHosts) > 0 || len(spec.DeniedHosts) > 0 || spec.AllowPrivate || len(spec.Packages) > 0 ||
		spec.Isolation != "" || len(spec.Volumes) > 0 ||
		len(spec.Env) > 0 || (spec.WorkingDir != "" && spec.WorkingDir != "/home/user") {
		return "", false
	}
	b, err := json.Marshal([]any{rt, opts.Python, opts.HomeSize, opts.SandboxBinary, opts.NoRootUser, senv.Name, senv.BuildID, senv.Rootfs, senv.Env,
		spec.Memory(), spec.CPUs, spec.PidsLimit(defaultPids)})
	if err != nil {
		return "", false
	}
	return string(b), true
}

// poolSpec is the spec pool sandboxes start with: the shape of spec without
// what belongs to a caller (applied at the claim).
func poolSpec(spec driver.Spec) driver.Spec {
	spec.Name, spec.Tags, spec.Lifetime, spec.IdleTimeout, spec.BuildOutput = "", nil, 0, 0, nil
	return spec
}

type poolSet struct {
	mu sync.Mutex
	m  map[string]*pool
}

var pools = poolSet{m: map[string]*pool{}}

// poolLauncher starts one pool sandbox whose supervisor gets ownerR.
type poolLauncher func(ctx context.Context, ownerR *os.File) (*instance, error)

type poolEntry struct {
	inst  *instance
	owner *os.File // the write end: closing it unclaimed ends the sandbox
}

type pool struct {
	launch poolLauncher
	wake   chan struct{}
	fills  sync.WaitGroup

	mu       sync.Mutex
	target   int
	ready    []*poolEntry
	starting int
	closed   bool
	retryAt  time.Time
	backoff  time.Duration
	lastErr  error
}

// get returns the pool for key, started, aiming at n ready sandboxes.
func (ps *poolSet) get(key string, n int, launch poolLauncher) *pool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pl := ps.m[key]
	if pl == nil {
		pl = &pool{launch: launch, wake: make(chan struct{}, 1)}
		ps.m[key] = pl
		go pl.run()
	}
	pl.mu.Lock()
	pl.target = max(pl.target, n)
	pl.mu.Unlock()
	pl.poke()
	return pl
}

func (pl *pool) poke() {
	select {
	case pl.wake <- struct{}{}:
	default:
	}
}

// take hands out a ready sandbox as the one spec asks for, or returns nil
// (a miss) when none is ready. One whose claim fails is ended and the next
// one tried.
func (pl *pool) take(ctx context.Context, spec driver.Spec) (*instance, error) {
	defer pl.poke()
	for {
		pl.mu.Lock()
		if pl.closed || len(pl.ready) == 0 {
			pl.mu.Unlock()
			statMisses.Add(1)
			return nil, nil
		}
		e := pl.ready[0]
		pl.ready = pl.ready[1:]
		pl.retryAt = later(pl.retryAt, time.Now().Add(poolRefillDelay))
		pl.mu.Unlock()
		if err := e.claim(ctx, spec); err != nil {
			go e.discard(context.Background())
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		statHits.Add(1)
		return e.inst, nil
	}
}

// claim makes e the sandbox spec asks for: the agent's lifetime and idle
// timeout first, then the record (name, tags, times, no longer Pool), and
// only then the release of the pool's hold. A claimer that dies half-way
// leaves a sandbox its supervisor ends (the hold closes unreleased).
func (e *poolEntry) claim(ctx context.Context, spec driver.Spec) error {
	r, err := e.inst.record()
	if err != nil {
		return err
	}
	if !r.alive() || !r.Pool {
		return errors.New("warm-pool sandbox gone")
	}
	// Pool sandboxes wait with no idle timeout (nobody uses them yet). The
	// agent call and the record's write (a file replaced on the runtime
	// directory's filesystem: 0.3-2 ms on a busy disk) overlap: both only
	// need to be done before the release.
	timeouts := make(chan error, 1)
	go func() {
		_, err := e.inst.c.SetTimeouts(ctx, spec.Lifetime, spec.IdleTimeout)
		timeouts <- err
	}()
	now := time.Now()
	r.Pool, r.Name, r.Tags, r.CreatedAt, r.EndAt = false, spec.Name, spec.Tags, now, now.Add(spec.Lifetime)
	werr := writeRecord(e.inst.dir(), r)
	if err := <-timeouts; err != nil {
		return fmt.Errorf("setting a warm-pool sandbox's lifetime and idle timeout: %w", err)
	}
	if werr != nil {
		return werr
	}
	if _, err := e.owner.Write([]byte{poolClaimed}); err != nil {
		return fmt.Errorf("releasing a warm-pool sandbox: %w", err)
	}
	e.owner.Close()
	return nil
}

// discard ends an unclaimed pool sandbox and waits for its cleanup.
func (e *poolEntry) discard(ctx context.Context) {
	e.owner.Close()
	_ = killByDir(ctx, e.inst.dir())
	_ = e.inst.Release()
}

// close stops the pool and returns the sandboxes it held.
func (pl *pool) close() []*poolEntry {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.closed = true
	out := pl.ready
	pl.ready = nil
	pl.poke()
	return out
}

// run keeps the pool full until closed. The CPU budget: one sandbox starts
// at a time, so a pool refilling after a burst of claims takes at most
// about one core from the claimers.
func (pl *pool) run() {
	for {
		pl.mu.Lock()
		if pl.closed {
			pl.mu.Unlock()
			return
		}
		var wait <-chan time.Time
		if now := time.Now(); now.Before(pl.retryAt) {
			wait = time.After(pl.retryAt.Sub(now))
		} else if pl.starting == 0 && len(pl.ready) < pl.target {
			pl.starting++
			pl.fills.Add(1)
			go pl.fill()
		}
		pl.mu.Unlock()
		select {
		case <-pl.wake:
		case <-wait:
		}
	}
}

// fill starts one pool sandbox.
func (pl *pool) fill() {
	defer pl.fills.Done()
	defer pl.poke()
	ownerR, ownerW, err := os.Pipe()
	var inst *instance
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), poolFillTimeout)
		inst, err = pl.launch(ctx, ownerR)
		ownerR.Close() // the supervisor has its own copy
		if err == nil {
			// Ready means the default kernel is up, not starting, and the
			// claimer's first execution finds its connection open.
			if err = inst.c.Warm(ctx); err == nil {
				err = inst.c.OpenExecConn(ctx)
			}
			if err != nil {
				err = fmt.Errorf("warm-pool sandbox: %w", err)
				ownerW.Close()
				_ = killByDir(context.Background(), inst.dir())
				_ = inst.Release()
			}
		} else {
			ownerW.Close()
		}
		cancel()
	}
	pl.mu.Lock()
	pl.starting--
	if err != nil {
		statFailures.Add(1)
		pl.lastErr = err
		pl.backoff = min(max(2*pl.backoff, time.Second), poolBackoffMax)
		pl.retryAt = time.Now().Add(pl.backoff)
		pl.mu.Unlock()
		return
	}
	e := &poolEntry{inst: inst, owner: ownerW}
	if pl.closed {
		pl.mu.Unlock()
		e.discard(context.Background())
		return
	}
	pl.backoff, pl.lastErr = 0, nil
	pl.ready = append(pl.ready, e)
	pl.mu.Unlock()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
