package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/code-sandboxes/code-sandboxes/internal/ids"
)

// A warm pool keeps ready sandboxes (pod running, agent answering, kernel
// started) for one plan, and hands one out on Create: the claim is a
// relabel and a SetTimeout, tens of milliseconds instead of a pod start.
//
// Pools live in this process. Their pods carry labelPool and a short
// lifetime (poolLifetime) that the pool renews while it runs: when the
// process exits, its pool pods end themselves within poolLifetime and
// sweeps delete them; nothing leaks for long.
const (
	poolLifetime = 5 * time.Minute
	poolRenew    = time.Minute
	// poolMaxStarting bounds the pods one pool starts at once.
	poolMaxStarting = 8
	// poolBackoffMax caps the wait between failed fills.
	poolBackoffMax = time.Minute
	// poolDeadline is a pool pod's activeDeadlineSeconds: the backstop
	// for a wedged agent in a pool nobody sweeps any more. A claim lowers
	// it to the sandbox's own; sandboxes that would outlive it start cold.
	poolDeadline = 7 * 24 * time.Hour
)

// PoolStats counts warm-pool activity across this process's pools, for
// benchmarks and monitoring.
type PoolStats struct {
	// Hits: Creates served from a pool; Misses: Creates that wanted a
	// pooled sandbox and found none ready (they started one cold).
	Hits, Misses int64
	// Ready pods waiting in pools; Starting pods being made for them.
	Ready, Starting int
	// Failures of pool fills, and the last one's message.
	Failures  int64
	LastError string
}

var (
	statHits, statMisses, statFailures atomic.Int64
)

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

// ClosePools stops every pool of this process and deletes the pods they
// hold (programs call it on shutdown; without it the pods end themselves
// within poolLifetime).
func ClosePools(ctx context.Context) {
	pools.mu.Lock()
	all := pools.m
	pools.m = map[string]*pool{}
	pools.mu.Unlock()
	var wg sync.WaitGroup
	for _, pl := range all {
		for _, inst := range pl.close() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = inst.Kill(ctx)
				_ = inst.Release()
			}()
		}
	}
	wg.Wait()
}

type poolSet struct {
	mu sync.Mutex
	m  map[string]*pool
}

var pools = poolSet{m: map[string]*pool{}}

type pool struct {
	p    *plan
	hash string // labelPoolKey: which plan a pool pod was made for
	wake chan struct{}

	mu       sync.Mutex
	target   int
	ready    []*instance
	starting int
	closed   bool
	retryAt  time.Time
	backoff  time.Duration
	lastErr  error
}

// get returns the pool of p's plan, started, holding at least n pods.
func (ps *poolSet) get(p *plan, n int) *pool {
	key := p.key()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pl := ps.m[key]
	if pl == nil {
		sum := sha256.Sum256([]byte(key))
		pl = &pool{p: p, hash: hex.EncodeToString(sum[:])[:16], wake: make(chan struct{}, 1)}
		ps.m[key] = pl
		go pl.run()
	}
	pl.mu.Lock()
	if n > pl.target {
		pl.target = n
	}
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

// take hands out a ready pod as the sandbox m describes, or returns nil
// (a miss) when none is ready. A pod that fails its claim is discarded
// and the next one tried.
func (pl *pool) take(ctx context.Context, m meta) (*instance, error) {
	defer pl.poke()
	for {
		pl.mu.Lock()
		if len(pl.ready) == 0 || pl.closed {
			pl.mu.Unlock()
			statMisses.Add(1)
			return nil, nil
		}
		// The pod's deadline can only be lowered: it must leave room for
		// the sandbox's lifetime.
		pick := -1
		for i, r := range pl.ready {
			if time.Since(r.started)+m.lifetime+deadlineGrace < poolDeadline {
				pick = i
				break
			}
		}
		if pick < 0 {
			pl.mu.Unlock()
			statMisses.Add(1)
			return nil, nil
		}
		inst := pl.ready[pick]
		pl.ready = append(pl.ready[:pick], pl.ready[pick+1:]...)
		pl.mu.Unlock()
		if err := pl.claim(ctx, inst, m); err != nil {
			if ctx.Err() != nil {
				go pl.discard(inst)
				return nil, ctx.Err()
			}
			go pl.discard(inst)
			continue
		}
		statHits.Add(1)
		return inst, nil
	}
}

func (pl *pool) discard(inst *instance) {
	_ = inst.Kill(context.Background())
	_ = inst.Release()
}

// jsonPointer escapes a key for a JSON patch path (RFC 6901).
func jsonPointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// claim turns a pool pod into the sandbox m: one JSON patch (which fails
// unless the pod is still an unclaimed pool pod) gives it the sandbox's
// name, tags, expiry and activeDeadlineSeconds; then its agent's lifetime
// is set.
func (pl *pool) claim(ctx context.Context, inst *instance, m meta) error {
	labels, ann := map[string]string{}, map[string]string{}
	setIdentity(labels, ann, m.name, m.tags)
	endAt := time.Now().Add(m.lifetime)
	ann[annEndAt] = endAt.UTC().Format(time.RFC3339Nano)
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/labels/" + jsonPointer(labelPool), "value": "true"},
		{"op": "remove", "path": "/metadata/labels/" + jsonPointer(labelPool)},
		{"op": "remove", "path": "/metadata/labels/" + jsonPointer(labelPoolKey)},
	}
	for k, v := range labels {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels/" + jsonPointer(k), "value": v})
	}
	for k, v := range ann {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations/" + jsonPointer(k), "value": v})
	}
	// The deadline counts from the pod's start (inst.started is its
	// creation, a little earlier: the sandbox gets a little more, never
	// less). It only ever goes down: take checked it fits.
	ads := int64(math.Ceil((time.Since(inst.started) + m.lifetime + deadlineGrace).Seconds()))
	ops = append(ops, map[string]any{"op": "replace", "path": "/spec/activeDeadlineSeconds", "value": ads})
	raw, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	c := pl.p.c
	pctx, cancel := callCtx(ctx)
	_, err = c.cs.CoreV1().Pods(c.namespace).Patch(pctx, podName(inst.id), types.JSONPatchType, raw, metav1.PatchOptions{})
	cancel()
	if err != nil {
		return apiError("claiming a warm-pool sandbox", err, c.namespace)
	}
	if _, err := inst.cl.SetTimeout(ctx, m.lifetime); err != nil {
		return fmt.Errorf("setting a warm-pool sandbox's lifetime: %w", err)
	}
	// Pool pods wait with no idle timeout (nobody uses them yet); the
	// sandbox gets the caller's from its claim on.
	if m.idle > 0 {
		if _, err := inst.cl.SetIdleTimeout(ctx, m.idle); err != nil {
			return fmt.Errorf("setting a warm-pool sandbox's idle timeout: %w", err)
		}
	}
	return nil
}

// close stops the pool and returns the pods it held.
func (pl *pool) close() []*instance {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.closed = true
	out := pl.ready
	pl.ready = nil
	pl.poke()
	return out
}

// run keeps the pool full and its pods' lifetimes renewed until closed.
func (pl *pool) run() {
	renew := time.NewTicker(poolRenew)
	defer renew.Stop()
	for {
		pl.mu.Lock()
		if pl.closed {
			pl.mu.Unlock()
			return
		}
		var wait <-chan time.Time
		if now := time.Now(); now.Before(pl.retryAt) {
			wait = time.After(pl.retryAt.Sub(now))
		} else {
			for pl.starting < poolMaxStarting && len(pl.ready)+pl.starting < pl.target {
				pl.starting++
				go pl.fill()
			}
		}
		pl.mu.Unlock()
		select {
		case <-pl.wake:
		case <-wait:
		case <-renew.C:
			pl.renewAll()
		}
	}
}

// fill starts one pool pod.
func (pl *pool) fill() {
	m := meta{id: ids.Sandbox('k'), lifetime: poolLifetime, pool: pl.hash}
	inst, err := pl.p.c.launch(context.Background(), pl.p, m)
	pl.mu.Lock()
	pl.starting--
	switch {
	case err != nil:
		statFailures.Add(1)
		pl.lastErr = err
		if pl.backoff == 0 {
			pl.backoff = time.Second
		} else if pl.backoff *= 2; pl.backoff > poolBackoffMax {
			pl.backoff = poolBackoffMax
		}
		pl.retryAt = time.Now().Add(pl.backoff)
	case pl.closed:
		pl.mu.Unlock()
		pl.discard(inst)
		return
	default:
		pl.backoff, pl.lastErr = 0, nil
		pl.ready = append(pl.ready, inst)
	}
	pl.mu.Unlock()
	pl.poke()
}

// renewAll restarts the lifetime of every waiting pod (agent and expiry
// annotation), and drops those that no longer answer. A pod is out of the
// ready list while it is renewed: a Create claiming it meanwhile would
// have its lifetime reset to the pool's (or, on a failed renew, be
// killed) after the claim.
func (pl *pool) renewAll() {
	pl.mu.Lock()
	waiting := append([]*instance(nil), pl.ready...)
	pl.mu.Unlock()
	for _, inst := range waiting {
		pl.mu.Lock()
		i := slices.Index(pl.ready, inst)
		if i < 0 || pl.closed {
			pl.mu.Unlock()
			continue // claimed (or handed to close) since the snapshot
		}
		pl.ready = slices.Delete(pl.ready, i, i+1)
		pl.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		_, err := inst.cl.SetTimeout(ctx, poolLifetime)
		if err == nil {
			err = pl.p.c.patchAnnotations(ctx, podName(inst.id), map[string]string{annEndAt: time.Now().Add(poolLifetime).UTC().Format(time.RFC3339Nano)})
		}
		cancel()
		pl.mu.Lock()
		if err == nil && !pl.closed {
			pl.ready = append(pl.ready, inst)
			pl.mu.Unlock()
			continue
		}
		pl.mu.Unlock()
		pl.discard(inst)
	}
	pl.poke()
}
