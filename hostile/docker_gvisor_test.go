package hostile_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/hostile"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// TestHostileOnDockerGVisor runs the hostile-code suite on the docker
// variant under isolation gvisor: the engine's runsc runtime (registered by
// scripts/with-dockerd.sh; missing fails under CI=true). No network cases:
// the docker variant refuses network all and allowlist under gVisor.
func TestHostileOnDockerGVisor(t *testing.T) {
	if testing.Short() {
		t.Skip("creates containers")
	}
	requireStaticBinary(t)
	c := dockerEngine(t)
	run := "g" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := sandboxes.Config{Variant: "docker", EnvironmentDir: envStoreDir, Tags: map[string]string{"hostile-run": run},
		Isolation: sandboxes.IsolationGVisor}
	pythonEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, cfg)
	if errors.Is(err, sandboxes.ErrNotSupported) {
		sandboxestest.Require(t, false, "a Docker engine with gVisor's runsc runtime (make test's with-dockerd.sh registers it): "+err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = sb.Close()

	d := &dockerSandboxes{c: c, cfg: cfg, dirs: map[string]string{}}
	t.Cleanup(func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var left []string
			if cs := d.containers(t, "code-sandboxes.tag.hostile-run="+run); len(cs) > 0 {
				left = append(left, strconv.Itoa(len(cs))+" containers")
			}
			d.mu.Lock()
			for id, dir := range d.dirs {
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					left = append(left, "directory of "+id)
				}
			}
			d.mu.Unlock()
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("LINGERING after the suite: %s", strings.Join(left, ", "))
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
	})
	o := hostile.Options{
		SameHost:        true,
		Limits:          true,
		UserSpaceKernel: true,
		AgentOwnUID:     true,
		Created:         d.created,
		Secrets: func(t *testing.T, sb *sandboxes.Sandbox) []string {
			return []string{d.token(t, sb.ID())}
		},
		// A sandbox ended from inside (the agent killed, the Sentry out of
		// memory: see UserSpaceKernel) before its end: the engine removes
		// its container; its directory goes at the handle's Close (checked
		// for every sandbox of the run by the cleanup above), a sweep
		// can't tell it from a Create in progress for createGrace.
		Gone: func(t *testing.T, id string) {
			t.Helper()
			if err := waitFor(30*time.Second, func() error { return d.containerErr(t, id) }); err != nil {
				t.Fatalf("sandbox %s lingers 30s after it ended: %v", id, err)
			}
		},
		Skip: map[string]string{"ReadHostFiles": imageSkipReadHostFiles},
	}
	if !*full {
		for _, c := range resourceCases {
			o.Skip[c] = "resource exhaustion, proven on local (TestHostileLocalGVisor); run with -hostile.full for the docker engine's limits"
		}
	}
	start := time.Now()
	hostile.Run(t, cfg, o)
	t.Logf("suite ran in %s", time.Since(start).Round(time.Millisecond))
	logResults(t)
}
