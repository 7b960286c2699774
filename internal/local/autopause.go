package local

// AutoPause (E2B's autoPause, lifecycle onTimeout "pause"): when the
// sandbox's lifetime ends, its supervisor pauses it (pause.go) instead of
// killing it. The agent enforces the lifetime itself for every other
// sandbox; here its own clock runs autoPauseSlack(memory) later, as a backstop
// should the supervisor be wedged, and the supervisor acts at EndAt. A
// failed pause ends the sandbox, as the lifetime's end would have.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// autoPauseSlack is how much later than EndAt the agent of an AutoPause
// sandbox with memory limit mem ends itself: longer than a whole pause may
// take (its bound grows with the memory: pause_bound.go).
func autoPauseSlack(mem int64) time.Duration {
	return pauseWaitFor(mem) + quiesceWait + time.Minute
}

// lifetimeGrace is how long after EndAt the supervisor ends a sandbox
// whose agent should have ended it (its backstop).
const lifetimeGrace = 5 * time.Second

// checkAutoPause refuses AutoPause where the sandbox could not pause.
func checkAutoPause(spec driver.Spec, isolation string) error {
	if !spec.AutoPause {
		return nil
	}
	if isolation != IsolationGVisor {
		return fmt.Errorf("%w: AutoPause pauses the sandbox when its lifetime ends, and pausing needs isolation gvisor (gVisor checkpoints the whole sandbox; CRIU, which isolation namespaces would need, fails on this kernel): create it with isolation gvisor", sberr.ErrNotSupported)
	}
	if spec.Network != "none" {
		return fmt.Errorf("%w: AutoPause pauses the sandbox when its lifetime ends, and a sandbox with network %s can't pause (it runs gVisor on the host's network stack, runsc --network=host, and runsc can't checkpoint hostinet): use network none", sberr.ErrNotSupported, spec.Network)
	}
	return nil
}

// lifetimeWake is how long the supervisor of the sandbox in dir sleeps
// before its lifetime's end is due: EndAt for an AutoPause sandbox it can
// pause, EndAt plus the grace otherwise.
func lifetimeWake(dir string, canPause bool) time.Duration {
	cur, err := readRecord(dir)
	if err != nil || cur.EndAt.IsZero() {
		return time.Minute
	}
	if cur.AutoPause && canPause {
		return time.Until(cur.EndAt)
	}
	return time.Until(cur.EndAt.Add(lifetimeGrace))
}

// endLifetime ends the sandbox whose lifetime is over: an AutoPause one
// is paused (and so ends, its checkpoint kept), any other, or one whose
// pause failed, killed.
func endLifetime(dir string, proc supervised) {
	if g, ok := proc.(*gvisorSandbox); ok {
		if r, err := readRecord(dir); err == nil && r.AutoPause {
			if err := g.autoPause(dir, r); err == nil {
				return
			}
		}
	}
	_ = proc.Kill()
}

// autoPause pauses the sandbox at its lifetime's end. Its record's end is
// moved a whole lifetime on first: what a resume gives it back (finishPause
// keeps what is left of it).
func (g *gvisorSandbox) autoPause(dir string, r *record) error {
	if r.Lifetime > 0 {
		r.EndAt = time.Now().Add(r.Lifetime)
	}
	// Paused from now on, for whoever asks (the timeout has passed);
	// Resume waits for the checkpoint.
	r.Pausing = true
	if err := writeRecord(dir, r); err != nil {
		return err
	}
	return g.checkpointOnce(dir)
}

// waitPausing waits while the sandbox is being auto-paused, and returns
// its record once it is paused (or the pause ended it: ErrNotFound).
func (i *instance) waitPausing(ctx context.Context, r *record) (*record, error) {
	ctx, cancel := context.WithTimeout(ctx, pauseWaitFor(r.Memory))
	defer cancel()
	for r.Pausing && !r.Paused && r.alive() {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("sandbox %s is being paused (its timeout ended): %w", i.id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		var err error
		if r, err = i.record(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// checkpointOnce is checkpoint for both a caller's pause and the
// lifetime's: one at a time, and none once the sandbox is paused.
func (g *gvisorSandbox) checkpointOnce(dir string) error {
	g.pause.serial.Lock()
	defer g.pause.serial.Unlock()
	if g.pausedOK() {
		return nil
	}
	return g.checkpoint(dir)
}

// timeoutMoved tells an AutoPause sandbox's supervisor that its end moved
// (it sleeps until EndAt, which SetTimeout may have brought closer).
// SIGWINCH: ignored by default, so a supervisor that doesn't listen for
// it (no AutoPause) is unharmed.
func timeoutMoved(r *record) {
	if r.alive() {
		_ = syscall.Kill(r.ShimPid, syscall.SIGWINCH)
	}
}

// agentTimeout is the lifetime the agent of r is told for d: an AutoPause
// sandbox's agent only ends it as a backstop, later.
func agentTimeout(r *record, d time.Duration) time.Duration {
	if r.AutoPause {
		return d + autoPauseSlack(r.Memory)
	}
	return d
}

// afterResume sets the agent's clock of a resumed AutoPause sandbox (its
// own clock kept the slack past the end it was paused at).
func (i *instance) afterResume(ctx context.Context, r *record) error {
	if !r.AutoPause {
		return nil
	}
	cur, err := i.record()
	if err != nil {
		return err
	}
	return i.SetTimeout(ctx, max(time.Until(cur.EndAt), time.Second))
}

var (
	shimSignals                     sync.Once
	pauseSig, timeoutSig, policySig chan os.Signal
)

// listenShimSignals starts listening, once per shim, for the signals of a
// sandbox's supervisor: SIGUSR2 (pause), SIGWINCH (its end moved) and
// SIGUSR1 (a new network policy). It returns the SIGUSR2 channel. Every
// shim calls it before it reports the sandbox up: Go drops a SIGUSR1/2 that
// arrives before anyone listens, and the caller may send one as soon as
// Create returns (a pause, or an UpdateNetwork that then waited 10 s for
// nothing: TestAgainstOurServer in CI).
func listenShimSignals() chan os.Signal {
	shimSignals.Do(func() {
		pauseSig, timeoutSig, policySig = make(chan os.Signal, 1), make(chan os.Signal, 1), make(chan os.Signal, 1)
		signal.Notify(pauseSig, syscall.SIGUSR2)
		signal.Notify(timeoutSig, syscall.SIGWINCH)
		signal.Notify(policySig, syscall.SIGUSR1)
	})
	return pauseSig
}
