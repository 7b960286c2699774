//go:build linux

package sandboxes_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

func TestLocalTools(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	// The zero Config's network is "none": the tools still work.
	sandboxestest.RunTools(t, localConfig(t))
}

func TestDockerTools(t *testing.T) {
	cfg := dockerConfig(t)
	cfg.NetworkPolicy = "none"
	sandboxestest.RunTools(t, cfg)
}

// TestKubernetesTools: network "all" (the test cluster doesn't enforce
// NetworkPolicy, so "none" is refused there; the suite skips its network
// check).
func TestKubernetesTools(t *testing.T) {
	k8sCluster(t)
	sandboxestest.RunTools(t, k8sConfig(""))
}

// TestToolsRefusedUpFront: a bad tool, or tools on a variant that can't call
// back (e2b), fail Create before anything is created.
func TestToolsRefusedUpFront(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	noop := func(ctx context.Context, args json.RawMessage) (any, error) { return nil, nil }
	cfg := localConfig(t)
	cfg.Tools = []sandboxes.Tool{{Name: "bad name", Func: noop}}
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidInput) {
		t.Errorf("a bad tool name: %v, want ErrInvalidInput", err)
	}
	cfg.Tools = []sandboxes.Tool{{Name: "nofunc"}}
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidInput) {
		t.Errorf("a tool without Func: %v, want ErrInvalidInput", err)
	}
	if _, err := sandboxes.Create(ctx, sandboxes.Config{Variant: "e2b", Tools: []sandboxes.Tool{{Name: "ok", Func: noop}}}); !errors.Is(err, sandboxes.ErrNotSupported) {
		t.Errorf("tools on e2b: %v, want ErrNotSupported", err)
	}
}

// TestLocalToolsIdle: a granted tool set (the host's stream held open) is
// not use: the sandbox still ends after its idle timeout, and a tool call
// in progress is use (the execution that makes it is).
func TestLocalToolsIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	ctx := context.Background()
	sleepy := sandboxes.Tool{Name: "sleepy", Func: func(ctx context.Context, args json.RawMessage) (any, error) {
		select {
		case <-time.After(3 * time.Second):
			return "awake", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	sb := newLocal(t, func(c *sandboxes.Config) { c.IdleTimeout = 2 * time.Second; c.Tools = []sandboxes.Tool{sleepy} })
	ex, err := sb.RunCode(ctx, "import tools\ntools.sleepy()")
	if err != nil || ex.Text() != "awake" {
		t.Fatalf("a tool call longer than the idle timeout: %+v, %v", ex, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := sandboxes.Get(ctx, localConfig(t), sb.ID()); errors.Is(err, sandboxes.ErrNotFound) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatal("the sandbox with tools granted outlived its idle timeout")
}
