//go:build linux

package sandboxes_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

// AutoPause where the sandbox could not pause is refused at Create with
// the reason, never a sandbox that is killed at its end after all.
func TestLocalAutoPauseRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	ctx := context.Background()
	cfg := localConfig(t)
	cfg.AutoPause = true
	if sb, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "gvisor") {
		if sb != nil {
			_ = sb.Close()
		}
		t.Fatalf("AutoPause under namespaces: %v, want ErrNotSupported naming gvisor", err)
	}
	cfg.Variant = "docker"
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrNotSupported) {
		t.Fatalf("AutoPause on docker: %v, want ErrNotSupported", err)
	}
	requireGVisor(t)
	cfg = gvisorConfig(t)
	cfg.AutoPause, cfg.NetworkPolicy = true, sandboxes.NetworkAll
	if sb, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "network none") {
		if sb != nil {
			_ = sb.Close()
		}
		t.Fatalf("AutoPause with network all: %v, want ErrNotSupported naming network none", err)
	}
}

// The lifetime's end pauses an AutoPause sandbox: its state is kept and
// Resume brings it back with a whole lifetime. The end comes from a
// SetTimeout that brings it closer (the supervisor must notice), and the
// agent's own clock must not end the sandbox first.
func TestLocalGVisorAutoPause(t *testing.T) {
	requireGVisor(t)
	state := t.TempDir()
	t.Setenv("CODE_SANDBOXES_STATE_DIR", state)
	sb := newLocal(t, func(c *sandboxes.Config) {
		c.Isolation, c.AutoPause, c.MaxLifetime = sandboxes.IsolationGVisor, true, 10*time.Minute
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if ex := runOut(t, sb, counterCode); ex.Error != nil {
		t.Fatal(ex.Error)
	}
	if err := sb.SetTimeout(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	waitStatus(ctx, t, sb, sandboxes.StatusPaused)
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if ex := runOut(t, sb, "x + 2"); ex.Text() != "42" {
		t.Fatalf("x + 2 after the auto-pause: %q (%v), want 42", ex.Text(), ex.Error)
	}
	if n, m := counterAdvances(t, sb); m <= n {
		t.Errorf("the counter process does not run on after the auto-pause (%d then %d)", n, m)
	}
	info, err := sb.Info(ctx)
	if err != nil || info.Status != "running" {
		t.Fatalf("Info after Resume: %q (%v)", info.Status, err)
	}
	if left := time.Until(info.EndAt); left < 5*time.Minute {
		t.Errorf("resumed with %s left, want a whole lifetime (10m)", left)
	}
	// And again, from the resumed sandbox (its agent's clock was reset);
	// killed as soon as it says paused, which is mostly while its
	// checkpoint is still written: nothing may be left (its supervisor
	// did not hear the kill during the pause, and kept a paused record).
	if err := sb.SetTimeout(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	waitStatus(ctx, t, sb, sandboxes.StatusPaused)
	if err := sb.Close(); err != nil {
		t.Fatalf("kill while auto-pausing: %v", err)
	}
	if _, err := os.Stat(local.SandboxDir(runtimeDir(t), sb.ID())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed sandbox's directory is still there (%v)", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "paused")); len(ents) != 0 {
		t.Errorf("a checkpoint of the killed sandbox is left: %v", ents)
	}
}

func waitStatus(ctx context.Context, t *testing.T, sb *sandboxes.Sandbox, want string) {
	t.Helper()
	for {
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatalf("Info while waiting for %s: %v (the sandbox was killed, not paused?)", want, err)
		}
		if info.Status == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the sandbox is still %s, want %s", info.Status, want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
