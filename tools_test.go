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
