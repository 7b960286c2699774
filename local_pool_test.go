package sandboxes_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// poolRecord is what the tests read of a sandbox's record (state.json):
// the facts a caller can't see through the API.
type poolRecord struct {
	ID       string   `json:"id"`
	Token    string   `json:"token"`
	ShimPid  int      `json:"shim_pid"`
	AgentPid int      `json:"agent_pid"`
	Cgroups  []string `json:"cgroups"`
	Pool     bool     `json:"pool"`
}

func poolRecords(t *testing.T, rt string) []poolRecord {
	t.Helper()
	ents, _ := os.ReadDir(rt)
	var out []poolRecord
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(rt, e.Name(), "state.json"))
		if err != nil {
			continue
		}
		var r poolRecord
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// startTestChild runs this test binary's test name in a child process
// with env added, killed when the test ends, and returns it and a scanner
// of its stdout.
func startTestChild(t *testing.T, name, env string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// waitFor polls cond (bounded: a condition that never comes fails the test,
// no duration is asserted).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dirsIn(rt string) int {
	ents, _ := os.ReadDir(rt)
	return len(ents)
}

// TestLocalWarmPool: claims come from the pool, each entry serves one
// caller with its own process, tmpfs, token and id, no code ran in it
// before, it gets the caller's name, lifetime and limits; a Create of
// another shape starts cold; closing the pools ends what waits in them and
// leaves the claimed sandboxes alone.
func TestLocalWarmPool(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt := ownRuntimeDir(t, "cs-pool-")
	const mem = 300 << 20
	cfg := sandboxes.Config{Variant: "local", Memory: mem, MaxLifetime: 10 * time.Minute,
		Options: local.Options{RuntimeDir: rt, WarmPool: 2}}
	closed := false
	t.Cleanup(func() {
		if !closed {
			local.CloseWarmPools(context.Background())
		}
	})
	before := local.WarmPoolStats()
	first, err := sandboxes.Create(ctx, cfg) // a miss: it starts the pool
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	waitFor(t, "two pool sandboxes ready", func() bool { return local.WarmPoolStats().Ready >= 2 })
	// Waiting pool sandboxes are nobody's: List shows the caller's only.
	if l, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{}); err != nil || len(l) != 1 {
		t.Fatalf("List with two pool sandboxes waiting: %v, %v (want just the first sandbox)", l, err)
	}
	var got []*sandboxes.Sandbox
	for i := 0; i < 2; i++ {
		c := cfg
		c.Name = fmt.Sprintf("claimed-%d", i)
		sb, err := sandboxes.Create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		got = append(got, sb)
	}
	after := local.WarmPoolStats()
	if hits := after.Hits - before.Hits; hits != 2 {
		t.Fatalf("pool hits = %d, want 2 (stats %+v)", hits, after)
	}
	// Each claimed sandbox's default kernel is up at the claim (the pool
	// counts an entry ready only then), having executed nothing.
	kernels := map[string]map[int]bool{}
	for _, r := range poolRecords(t, rt) {
		kernels[r.ID] = pythonNSPids(r.AgentPid)
	}
	// Nothing of a pool entry's past: no execution before ours, the files
	// of a cold sandbox (the kernel's cache) and no others.
	const listing = "import os; sorted(os.listdir('/home/user')) + sorted(os.listdir('/tmp'))"
	want, err := first.RunCode(ctx, listing)
	if err != nil {
		t.Fatal(err)
	}
	for i, sb := range got {
		ex, err := sb.RunCode(ctx, listing)
		if err != nil {
			t.Fatal(err)
		}
		if ex.ExecutionCount != 1 || ex.Text() != want.Text() {
			t.Fatalf("claimed sandbox %d: execution count %d, files %s; want the first execution, files %s as in a cold sandbox", i, ex.ExecutionCount, ex.Text(), want.Text())
		}
		ex, err = sb.RunCode(ctx, "import os; [os.getpid(), len(In)]")
		if err != nil {
			t.Fatal(err)
		}
		var pidIn [2]int
		if _, err := fmt.Sscanf(ex.Text(), "[%d, %d]", &pidIn[0], &pidIn[1]); err != nil || !kernels[sb.ID()][pidIn[0]] || pidIn[1] != 3 {
			t.Fatalf("claimed sandbox %d: kernel pid and history %s (%v); want a kernel running before the claim (pids %v) with two cells run", i, ex.Text(), err, kernels[sb.ID()])
		}
		if sb.Name() != fmt.Sprintf("claimed-%d", i) {
			t.Fatalf("name %q", sb.Name())
		}
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Name != sb.Name() || info.EndAt.After(time.Now().Add(11*time.Minute)) || info.Memory != mem {
			t.Fatalf("claimed sandbox %d: info %+v; want its name, a lifetime of 10 min and memory %d", i, info, mem)
		}
	}
	// No sharing: a file written in one is not in the other.
	if _, err := got[0].RunCode(ctx, "open('/home/user/mine', 'w').write('0')"); err != nil {
		t.Fatal(err)
	}
	if ex, err := got[1].RunCode(ctx, "import os; os.path.exists('/home/user/mine')"); err != nil || ex.Text() != "False" {
		t.Fatalf("a file of one claimed sandbox seen in the other: %v %v", ex, err)
	}
	recs := map[string]poolRecord{}
	for _, r := range poolRecords(t, rt) {
		recs[r.ID] = r
	}
	seen := map[string]string{}
	for _, sb := range append([]*sandboxes.Sandbox{first}, got...) {
		r, ok := recs[sb.ID()]
		if !ok || r.Pool {
			t.Fatalf("sandbox %s: record %+v (want one, no longer a pool one)", sb.ID(), r)
		}
		for _, k := range []string{"token " + r.Token, "agent " + strconv.Itoa(r.AgentPid), "shim " + strconv.Itoa(r.ShimPid)} {
			if other, dup := seen[k]; dup {
				t.Fatalf("%s shared by %s and %s", k, other, sb.ID())
			}
			seen[k] = sb.ID()
		}
		// The caller's memory limit, in the sandbox's own cgroup.
		if len(r.Cgroups) > 0 {
			limit := ""
			for _, d := range r.Cgroups {
				for _, f := range []string{"memory.max", "memory.limit_in_bytes"} {
					if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
						limit = strings.TrimSpace(string(b))
					}
				}
			}
			if limit != strconv.Itoa(mem) {
				t.Fatalf("sandbox %s: memory limit %q in its cgroup, want %d", sb.ID(), limit, mem)
			}
		}
	}
	// Another shape (an environment variable is fixed at start) starts cold.
	c := cfg
	c.Env = map[string]string{"POOL_TEST": "cold"}
	hitsBefore := local.WarmPoolStats().Hits
	cold, err := sandboxes.Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Close()
	if ex, err := cold.RunCode(ctx, "import os; os.environ['POOL_TEST']"); err != nil || ex.Text() != "cold" {
		t.Fatalf("env of the cold sandbox: %v %v", ex, err)
	}
	if h := local.WarmPoolStats().Hits; h != hitsBefore {
		t.Fatalf("a Create of another shape was served from the pool")
	}
	// Closing the pools ends the waiting sandboxes, not the claimed ones.
	waitFor(t, "the pool refilled", func() bool { return local.WarmPoolStats().Ready >= 2 })
	local.CloseWarmPools(ctx)
	closed = true
	if s := local.WarmPoolStats(); s.Ready != 0 || s.Starting != 0 {
		t.Fatalf("after local.CloseWarmPools: %+v", s)
	}
	for _, r := range poolRecords(t, rt) {
		if r.Pool {
			t.Fatalf("pool sandbox %s left after local.CloseWarmPools", r.ID)
		}
	}
	if n := dirsIn(rt); n != 4 {
		t.Fatalf("%d sandbox directories after closing the pools, want the 4 handed out", n)
	}
	for _, sb := range append([]*sandboxes.Sandbox{first, cold}, got...) {
		if ex, err := sb.RunCode(ctx, "1 + 1"); err != nil || ex.Text() != "2" {
			t.Fatalf("a claimed sandbox stopped working after the pools closed: %v %v", ex, err)
		}
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := dirsIn(rt); n != 0 {
		t.Fatalf("%d sandbox directories left", n)
	}
}

// TestLocalWarmPoolOwnerKilled: a process holding a pool is SIGKILLed (no
// chance to close it); the pool's sandboxes end themselves, leaving nothing
// in the runtime directory and no supervisor running.
func TestLocalWarmPoolOwnerKilled(t *testing.T) {
	if rt := os.Getenv("CS_POOL_OWNER_RT"); rt != "" {
		poolOwner(rt)
		return
	}
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	rt := ownRuntimeDir(t, "cs-pool-")
	cmd, sc := startTestChild(t, "TestLocalWarmPoolOwnerKilled", "CS_POOL_OWNER_RT="+rt)
	ready := false
	for sc.Scan() {
		if sc.Text() == "pool ready" {
			ready = true
			break
		}
	}
	if !ready {
		t.Fatal("the pool owner exited before its pool was ready")
	}
	recs := poolRecords(t, rt)
	pooled := 0
	for _, r := range recs {
		if r.Pool {
			pooled++
		}
	}
	if pooled < 2 {
		t.Fatalf("%d pool sandboxes in the owner's runtime dir, want 2: %+v", pooled, recs)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	waitFor(t, "the dead owner's sandboxes to end", func() bool { return dirsIn(rt) == 0 })
	for _, r := range recs {
		if syscall.Kill(r.ShimPid, 0) == nil {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", r.ShimPid)); err == nil && strings.HasPrefix(string(b), "code-sandboxes-shim") {
				t.Fatalf("supervisor %d of pool sandbox %s still running", r.ShimPid, r.ID)
			}
		}
	}
}

// poolOwner fills a pool of two in rt, the first Create's sandbox killed,
// says so and waits to be killed.
func poolOwner(rt string) {
	ctx := context.Background()
	cfg := sandboxes.Config{Variant: "local", Options: local.Options{RuntimeDir: rt, WarmPool: 2}}
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		fmt.Println("create:", err)
		os.Exit(1)
	}
	_ = sb.Close()
	for local.WarmPoolStats().Ready < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("pool ready")
	select {}
}

// pythonNSPids are the pids, in their own pid namespace, of the python
// processes under the host process pid.
func pythonNSPids(pid int) map[int]bool {
	out := map[int]bool{}
	var walk func(int)
	walk = func(p int) {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", p, task.Name()))
			for _, f := range strings.Fields(string(b)) {
				c, _ := strconv.Atoi(f)
				if c <= 0 {
					continue
				}
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c))
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", c))
				for _, l := range strings.Split(string(st), "\n") {
					if ns, ok := strings.CutPrefix(l, "NSpid:"); ok && strings.HasPrefix(string(comm), "python") {
						fs := strings.Fields(ns)
						if n, err := strconv.Atoi(fs[len(fs)-1]); err == nil {
							out[n] = true
						}
					}
				}
				walk(c)
			}
		}
	}
	walk(pid)
	return out
}
