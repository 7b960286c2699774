package e2bserver

import (
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/local"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// testServer runs a Server on 127.0.0.1:0 over a fresh runtime directory and
// tears it down (killing its sandboxes) at the end of the test. The test
// binary itself becomes each sandbox's agent: importing the sandboxes
// package makes it re-executable in that role.
func testServer(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	rt, err := os.MkdirTemp("", "cs-e2b-")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.APIKeys) == 0 && len(o.Keys) == 0 {
		o.APIKeys = []string{testKey}
	}
	setRuntimeDir(&o.Config, rt)
	if o.Config.Variant != "" && o.Config.Variant != "local" {
		o.Config.Tags = map[string]string{tagPrefix + "test": rt} // hidden from metadata, as every reserved tag
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := s.StartLoopback(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		// Everything the server created must be gone with it.
		cfg := o.Config
		if left, _ := sandboxes.List(context.Background(), cfg, sandboxes.ListOptions{Tags: o.Config.Tags}); len(left) != 0 {
			var names []string
			for _, i := range left {
				names = append(names, i.ID)
				_, _ = sandboxes.Kill(context.Background(), cfg, i.ID, sandboxes.ListOptions{})
			}
			t.Errorf("sandboxes left behind: %s", strings.Join(names, ", "))
		}
		os.RemoveAll(rt)
	})
	return s, url
}

// needSandboxes skips (or, in CI, fails) when this machine can't run local
// sandboxes.
func needSandboxes(t *testing.T) {
	t.Helper()
	err := isolate.CheckSupport()
	testdep.Require(t, err == nil, fmt.Sprintf("local sandboxes are not supported here: %v", err))
}

// needDocker skips (or, in CI, fails) without a Docker engine or without
// a static test binary (the docker variant bind-mounts it as the agent).
func needDocker(t *testing.T) {
	t.Helper()
	requireStatic(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := sandboxes.List(ctx, sandboxes.Config{Variant: "docker"}, sandboxes.ListOptions{})
	sandboxestest.Require(t, err == nil, fmt.Sprintf("a Docker engine (scripts/with-dockerd.sh): %v", err))
}

func needSandboxesB(b *testing.B) {
	b.Helper()
	if err := isolate.CheckSupport(); err != nil {
		b.Skipf("local sandboxes are not supported here: %v", err)
	}
}

func decodeBody(tb testing.TB, resp *http.Response, v any) {
	tb.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		tb.Fatal(err)
	}
}

// requireStatic: the docker and kubernetes variants run this test binary
// as the sandboxes' agent, which needs a static build.
func requireStatic(t *testing.T) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	static := !slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	f.Close()
	sandboxestest.Require(t, static, "a static test binary (it is the sandboxes' agent): run with CGO_ENABLED=0 (make test does)")
}

// setRuntimeDir gives a local Config's sandboxes the runtime directory
// rt, keeping its other local options; other variants' Configs are left
// as they are.
func setRuntimeDir(cfg *sandboxes.Config, rt string) {
	if v := sandboxes.NormalizeVariant(cfg.Variant); v != "" && v != "local" {
		return
	}
	lo, _ := cfg.Options.(local.Options)
	lo.RuntimeDir = rt
	cfg.Options = lo
}
