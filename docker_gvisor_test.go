//go:build linux

package sandboxes_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/docker"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// dockerGVisorConfig is a docker sandbox under gVisor: the engine must have
// the runsc runtime with --host-uds=create (scripts/with-dockerd.sh
// registers it when runsc is installed; missing fails under CI=true).
func dockerGVisorConfig(t *testing.T) sandboxes.Config {
	t.Helper()
	cfg := dockerConfig(t)
	cfg.Isolation = sandboxes.IsolationGVisor
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, cfg)
	if errors.Is(err, sandboxes.ErrNotSupported) {
		sandboxestest.Require(t, false, "a Docker engine with gVisor's runsc runtime (make test's with-dockerd.sh registers it): "+err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = sb.Close()
	return cfg
}

// TestDockerGVisorKernel: isolation gvisor on docker runs the container
// under runsc: the kernel seen inside is gVisor's.
func TestDockerGVisorKernel(t *testing.T) {
	cfg := dockerGVisorConfig(t)
	sb := newDocker(t, func(c *sandboxes.Config) { *c = cfg })
	if info, err := sb.Info(ctxT(t)); err != nil || info.Isolation != "gvisor" {
		t.Errorf("Info: isolation %q (%v), want gvisor", info.Isolation, err)
	}
	res, err := sb.Commands().Run(ctxT(t), "uname -r; cat /proc/version; id -u")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016") || !strings.HasSuffix(strings.TrimSpace(res.Stdout), "1000") {
		t.Fatalf("not gVisor's kernel, or not the sandbox user:\n%s%s", res.Stdout, res.Stderr)
	}
}

func TestDockerGVisorConformance(t *testing.T) {
	cfg := dockerGVisorConfig(t)
	sandboxestest.Run(t, cfg, sandboxestest.Options{Rich: true})
}

// An engine without the runtime, and network all (the engine's runsc runs
// its own network stack, which the network we attach from the host can't
// reach), are refused with the reason.
func TestDockerGVisorRefusals(t *testing.T) {
	cfg := dockerConfig(t)
	cfg.Isolation = sandboxes.IsolationGVisor
	cfg.Options = docker.Options{Runtime: "no-such-runsc"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), `no "no-such-runsc" runtime`) {
		t.Fatalf("Create on an engine without the runtime: %v, want ErrNotSupported naming it", err)
	}
	cfg.Options = nil
	cfg.NetworkPolicy = sandboxes.NetworkAll
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "runsc") {
		t.Fatalf("network all under gvisor on docker: %v, want ErrNotSupported", err)
	}
}
