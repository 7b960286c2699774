//go:build linux

package sandboxes_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

// counterCode starts a process that counts in /tmp/count, outside the
// kernel, so that a pause must keep processes as well as variables.
const counterCode = `import subprocess
subprocess.Popen(["sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done"], start_new_session=True)
x = 40`

func readCount(t *testing.T, sb *sandboxes.Sandbox) int {
	t.Helper()
	ex := runOut(t, sb, `int(open("/tmp/count").read() or 0)`)
	if ex.Error != nil {
		t.Fatalf("reading the counter: %v", ex.Error)
	}
	n, err := strconv.Atoi(strings.TrimSpace(ex.Text()))
	if err != nil {
		t.Fatalf("counter %q: %v", ex.Text(), err)
	}
	return n
}

// firstCount waits (at most 20 s) until the counter has written its first
// value and returns it: under gVisor's ptrace platform on a loaded host
// (CI: the kubernetes tests' image export beside it) the shell's start and
// first fork of mv took longer than a fixed 300 ms.
func firstCount(t *testing.T, sb *sandboxes.Sandbox) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ex := runOut(t, sb, `import os; os.path.exists("/tmp/count")`)
		if ex.Error != nil {
			t.Fatalf("looking for the counter: %v", ex.Error)
		}
		if strings.TrimSpace(ex.Text()) == "True" {
			return readCount(t, sb)
		}
		if time.Now().After(deadline) {
			t.Fatal("the counter wrote nothing in 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// counterAdvances reads the counter, then reads it again until it has gone
// past that (it ticks every 50 ms) or 10 s have passed; it returns the
// first and last values read. A bounded wait rather than one fixed sleep:
// under gVisor's ptrace platform on a loaded host one tick (a fork and exec
// of sleep and of mv) can take longer than a few hundred ms, and a single
// look then says "stopped" of a counter that runs.
func counterAdvances(t *testing.T, sb *sandboxes.Sandbox) (first, last int) {
	t.Helper()
	first = firstCount(t, sb)
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		if last = readCount(t, sb); last > first || time.Now().After(deadline) {
			return first, last
		}
	}
}

// sandboxCgroups are the cgroup directories the local sandbox runs in.
func sandboxCgroups(t *testing.T, id string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(local.SandboxDir(runtimeDir(t), id), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Cgroups []string `json:"cgroups"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.Cgroups
}

func TestLocalGVisorPauseResume(t *testing.T) {
	requireGVisor(t)
	sb := newLocal(t, func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if ex := runOut(t, sb, counterCode); ex.Error != nil {
		t.Fatal(ex.Error)
	}
	before := firstCount(t, sb)
	cgroups := sandboxCgroups(t, sb.ID())
	if len(cgroups) == 0 {
		t.Fatal("the gVisor sandbox has no cgroup in its record")
	}
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	info, err := sb.Info(ctx)
	if err != nil || info.Status != sandboxes.StatusPaused {
		t.Fatalf("Info after Pause: status %q (%v), want paused", info.Status, err)
	}
	// Nothing runs: the cgroup runsc made for the sandbox is gone.
	for _, d := range cgroups {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s still exists while paused (%v)", d, err)
		}
	}
	list, err := sandboxes.List(ctx, localConfig(t), sandboxes.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, i := range list {
		if i.ID == sb.ID() {
			found = i.Status == sandboxes.StatusPaused
		}
	}
	if !found {
		t.Errorf("List does not show %s as paused: %+v", sb.ID(), list)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if ex := runOut(t, sb, "x + 2"); ex.Error != nil || ex.Text() != "42" {
		t.Fatalf("x + 2 after resume = %q (%v), want 42", ex.Text(), ex.Error)
	}
	after, later := counterAdvances(t, sb)
	if after < before || later <= after {
		t.Fatalf("counter: %d before the pause, %d and %d after the resume; want it to go on from where it was", before, after, later)
	}
	if info, err := sb.Info(ctx); err != nil || info.Status != "running" {
		t.Fatalf("Info after Resume: status %q (%v)", info.Status, err)
	}
}

func TestLocalPauseRefusedUnderNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sb := newLocal(t, nil)
	err := sb.Pause(context.Background())
	if !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "gvisor") {
		t.Fatalf("Pause under namespaces: %v, want ErrNotSupported naming gvisor", err)
	}
	if ex := runOut(t, sb, "1 + 1"); ex.Text() != "2" {
		t.Fatalf("the sandbox does not run on after a refused pause: %q", ex.Text())
	}
}

// A caller that gives up mid-pause (its ctx ends) leaves a sandbox that is
// paused or running, never half: every Info on the way says one of the two,
// and whichever it ends as has its state.
func TestLocalGVisorPauseCancelled(t *testing.T) {
	requireGVisor(t)
	sb := newLocal(t, func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor })
	if ex := runOut(t, sb, "x = 40"); ex.Error != nil {
		t.Fatal(ex.Error)
	}
	for _, after := range []time.Duration{0, 20 * time.Millisecond, 200 * time.Millisecond} {
		pctx, pcancel := context.WithTimeout(context.Background(), after)
		err := sb.Pause(pctx)
		pcancel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		// The supervisor finishes what it started; watch it settle. A
		// pause that was started says so, and Info says "running" until its
		// checkpoint is done: wait for that (seconds on a busy host). One
		// that never started leaves the sandbox running: look for a while.
		started := err == nil || strings.Contains(err.Error(), "the pause goes on")
		var status string
		for i := 0; started || i < 100; i++ {
			info, ierr := sb.Info(ctx)
			if ierr != nil {
				t.Fatalf("cancelled after %s (Pause: %v): Info: %v", after, err, ierr)
			}
			status = info.Status
			if status != "running" && status != sandboxes.StatusPaused {
				t.Fatalf("cancelled after %s: status %q", after, status)
			}
			if status == sandboxes.StatusPaused {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("cancelled after %s: Pause said %v; the sandbox is %s", after, err, status)
		if status == sandboxes.StatusPaused {
			if err := sb.Resume(ctx); err != nil {
				t.Fatalf("Resume: %v", err)
			}
		}
		if ex := runOut(t, sb, "x + 2"); ex.Error != nil || ex.Text() != "42" {
			t.Fatalf("cancelled after %s: x + 2 = %q (%v), want 42", after, ex.Text(), ex.Error)
		}
		cancel()
	}
}

// 500 MB of a sandbox's memory survive a pause and a resume.
func TestLocalGVisorPauseLargeMemory(t *testing.T) {
	requireGVisor(t)
	sb := newLocal(t, func(c *sandboxes.Config) {
		c.Isolation = sandboxes.IsolationGVisor
		c.Memory = 2 << 30
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	code := `import hashlib, os
b = bytearray(os.urandom(1 << 20)) * 500
digest = hashlib.sha256(b).hexdigest()
len(b)`
	if hasRich() {
		code = `import hashlib, numpy
a = numpy.random.default_rng().integers(0, 2**62, size=(500 << 20) // 8, dtype=numpy.int64)
digest = hashlib.sha256(a.tobytes()).hexdigest()
a.nbytes`
	}
	if ex := runOut(t, sb, code); ex.Error != nil || ex.Text() != strconv.Itoa(500<<20) {
		t.Fatalf("allocating: %q (%v)", ex.Text(), ex.Error)
	}
	check := `hashlib.sha256(b).hexdigest() == digest`
	if hasRich() {
		check = `hashlib.sha256(a.tobytes()).hexdigest() == digest`
	}
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if ex := runOut(t, sb, check); ex.Error != nil || ex.Text() != "True" {
		t.Fatalf("the 500 MB after resume: %q (%v)", ex.Text(), ex.Error)
	}
}

// A snapshot starts as many sandboxes as wanted, each with its state, each
// its own from there on; the original runs on.
func TestLocalGVisorSnapshotFork(t *testing.T) {
	requireGVisor(t)
	t.Setenv("CODE_SANDBOXES_STATE_DIR", t.TempDir())
	sb := newLocal(t, func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if ex := runOut(t, sb, counterCode); ex.Error != nil {
		t.Fatal(ex.Error)
	}
	if err := sb.Snapshot(ctx, "bad/name"); !errors.Is(err, sandboxes.ErrInvalidConfig) {
		t.Fatalf("Snapshot with a path for a name: %v, want ErrInvalidConfig", err)
	}
	if err := sb.Snapshot(ctx, "forty"); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if ex := runOut(t, sb, "x = 0; x"); ex.Text() != "0" {
		t.Fatalf("the original after its snapshot: %q (%v)", ex.Text(), ex.Error)
	}
	seen := map[string]bool{sb.ID(): true}
	var forks []*sandboxes.Sandbox
	for n := 0; n < 3; n++ {
		cfg := localConfig(t)
		cfg.Snapshot = "forty"
		f, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			t.Fatalf("fork %d: %v", n, err)
		}
		t.Cleanup(func() { _ = f.Close() })
		if seen[f.ID()] {
			t.Fatalf("fork %d has id %s, already used", n, f.ID())
		}
		seen[f.ID()] = true
		if ex := runOut(t, f, "x + 2"); ex.Error != nil || ex.Text() != "42" {
			t.Fatalf("fork %d: x + 2 = %q (%v), want the snapshot's 42", n, ex.Text(), ex.Error)
		}
		if c1, c2 := counterAdvances(t, f); c2 <= c1 {
			t.Fatalf("fork %d: the snapshot's counter does not run (%d then %d)", n, c1, c2)
		}
		// The snapshot's token (the original's) does not open a fork;
		// the fork's own does.
		if code := agentStatus(t, f.ID(), sandboxToken(t, sb.ID())); code != http.StatusUnauthorized {
			t.Fatalf("fork %d answers the original's token with %d, want 401", n, code)
		}
		if code := agentStatus(t, f.ID(), sandboxToken(t, f.ID())); code != http.StatusOK {
			t.Fatalf("fork %d answers its own token with %d, want 200", n, code)
		}
		if ex := runOut(t, f, "x = "+strconv.Itoa(100+n)); ex.Error != nil {
			t.Fatal(ex.Error)
		}
		forks = append(forks, f)
	}
	for n, f := range forks {
		if ex := runOut(t, f, "x"); ex.Text() != strconv.Itoa(100+n) {
			t.Fatalf("fork %d: x = %q, want its own %d: the forks share state", n, ex.Text(), 100+n)
		}
	}
	if ex := runOut(t, sb, "x"); ex.Text() != "0" {
		t.Fatalf("the original: x = %q, want 0", ex.Text())
	}
}

func sandboxToken(t *testing.T, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(local.SandboxDir(runtimeDir(t), id), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Token == "" {
		t.Fatalf("token of %s: %v", id, err)
	}
	return r.Token
}

// agentStatus is the status of GET /contexts on sandbox id's agent socket
// with token.
func agentStatus(t *testing.T, id, token string) int {
	t.Helper()
	sock := filepath.Join(local.SandboxDir(runtimeDir(t), id), "agent.sock")
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "http://sandbox/contexts", nil)
	req.Header.Set("X-Access-Token", token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Code in the sandbox runs as the agent's uid and can send it the pause
// handshake's signals: quiescing the agent first does not break the
// host's pause, and the sandbox comes back.
func TestLocalGVisorPauseAfterHostileQuiesce(t *testing.T) {
	requireGVisor(t)
	sb, ctx := gvisorX40(t)
	// The agent closes every connection, this one's included: the call
	// may end in an error.
	_, _ = sb.Commands().Run(ctx, "kill -USR2 1; sleep 1")
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("Pause after the sandbox quiesced its own agent: %v", err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if ex := runOut(t, sb, "x + 2"); ex.Error != nil || ex.Text() != "42" {
		t.Fatalf("x + 2 = %q (%v)", ex.Text(), ex.Error)
	}
}

// A resume on a host without what it needs is refused with the reason,
// and the sandbox stays paused (its checkpoint kept).
func TestLocalGVisorResumeRefused(t *testing.T) {
	requireGVisor(t)
	sb, ctx := gvisorX40(t)
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CODE_SANDBOXES_RUNSC", "/nonexistent/runsc")
	err := sb.Resume(ctx)
	if !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "runsc") {
		t.Fatalf("Resume without runsc: %v, want ErrNotSupported naming runsc", err)
	}
	if info, err := sb.Info(ctx); err != nil || info.Status != sandboxes.StatusPaused {
		t.Fatalf("after a refused resume: %q (%v), want paused", info.Status, err)
	}
	os.Unsetenv("CODE_SANDBOXES_RUNSC")
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if ex := runOut(t, sb, "x + 2"); ex.Text() != "42" {
		t.Fatalf("x + 2 = %q", ex.Text())
	}
}
