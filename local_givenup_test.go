//go:build linux

package sandboxes_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
)

// A Create that gives up (its context ends: a client of serve hung up)
// after the supervisor started the sandbox but before it reported leaves
// nothing running. The supervisor was killed outright, and the sandbox it
// had started ran on with its directory and record gone: no list, sweep or
// kill could find it, and its host uid went to the next sandbox.
func TestLocalGivenUpCreateEndsItsSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	cfg := localConfig(t)
	giveUpAndCheck(t, cfg)
}

// The same for a fork from a snapshot, whose supervisor restores the
// sandbox (it too was killed outright).
func TestLocalGVisorGivenUpForkEndsIt(t *testing.T) {
	requireGVisor(t)
	t.Setenv("CODE_SANDBOXES_STATE_DIR", t.TempDir())
	sb := newLocal(t, func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor })
	if ex := runOut(t, sb, "x = 40"); ex.Error != nil {
		t.Fatal(ex.Error)
	}
	if err := sb.Snapshot(context.Background(), "s"); err != nil {
		t.Fatal(err)
	}
	cfg := localConfig(t)
	cfg.Snapshot = "s"
	giveUpAndCheck(t, cfg)
}

// giveUpAndCheck creates a sandbox with cfg in a runtime directory of its
// own and gives the Create up the moment the sandbox runs (the supervisor
// then waits 3 s before it records and reports it: local.ShimStallEnv);
// then the sandbox's agent must end, its directory (which holds its host
// uid's claim) go, and nothing be listed.
func giveUpAndCheck(t *testing.T, cfg sandboxes.Config) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "agent.pid")
	t.Setenv(local.ShimStallEnv, pidFile)
	rt := ownRuntimeDir(t, "cs-givenup-")
	setLocal(&cfg, func(o *local.Options) { o.RuntimeDir = rt })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer cancel()
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(pidFile); err == nil {
				return
			}
		}
	}()
	sb, err := sandboxes.Create(ctx, cfg)
	if err == nil {
		sb.Close()
		t.Fatal("Create returned a sandbox after its context ended")
	}
	b, rerr := os.ReadFile(pidFile)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if rerr != nil || perr != nil {
		t.Fatalf("the supervisor never started the sandbox (%v, %v): Create's error was %v", rerr, perr, err)
	}
	st, ok := procstat.Read(pid)
	if !ok {
		t.Fatalf("the sandbox's agent %d was gone before the check", pid)
	}
	t.Cleanup(func() {
		if !procstat.Ended(pid, st.StartTime) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !procstat.Ended(pid, st.StartTime) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent %d of a sandbox whose Create gave up (%v) still runs 30 s later", pid, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		ents, _ := os.ReadDir(rt)
		var left []string
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") { // not .exec, the binaries' execute-only copies
				left = append(left, e.Name())
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left in the runtime directory: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
	defer lcancel()
	infos, err := sandboxes.List(lctx, cfg, sandboxes.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		t.Errorf("listed after its Create gave up: %+v", in)
	}
}
