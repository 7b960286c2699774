//go:build linux

package sandboxes_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

// spareShims lists this process's children that are spare supervisors
// (started ahead, waiting for a spec).
func spareShims(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if string(cmd) != "code-sandboxes-shim\x00spare-waiting-for-a-sandbox-spec\x00" {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			out = append(out, pid)
		}
	}
	return out
}

// TestLocalSpareSupervisor: after a process's second cold Create a spare
// supervisor waits; the next Create is served by it (its record names the
// spare's pid) and is a sandbox like any other (its own id, token and
// directory, code runs, state kept); the spare serves that Create only, a
// new one takes its place, and a sandbox from a spare closes cleanly.
func TestLocalSpareSupervisor(t *testing.T) {
	t.Setenv(local.SpareSupervisorEnv, "1")
	ctx := context.Background()
	rt := ownRuntimeDir(t, "cs-pool-")
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}
	for i := range 2 {
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
	local.WaitSpares()
	// Other tests' spares (other binaries or environments) may wait too.
	before := spareShims(t)
	if len(before) == 0 {
		t.Fatal("no spare supervisor after two Creates")
	}
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	recs := poolRecords(t, rt)
	if len(recs) != 1 || !slices.Contains(before, recs[0].ShimPid) {
		t.Fatalf("records %+v: want one, supervised by a spare of %v", recs, before)
	}
	taken := recs[0].ShimPid
	// It shows its sandbox's directory, as a supervisor started for it.
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", taken)); string(b) != "code-sandboxes-shim\x00"+filepath.Base(local.SandboxDir(rt, recs[0].ID))+"\x00" {
		t.Errorf("the spare's command line once it supervises %s: %q", recs[0].ID, b)
	}
	if _, err := sb.RunCode(ctx, "x = 41"); err != nil {
		t.Fatal(err)
	}
	ex, err := sb.RunCode(ctx, "x + 1")
	if err != nil || ex.Text() != "42" {
		t.Fatalf("RunCode in a spare's sandbox: %v %v", ex, err)
	}
	local.WaitSpares()
	after := spareShims(t)
	if slices.Contains(after, taken) || !slices.ContainsFunc(after, func(p int) bool { return !slices.Contains(before, p) }) {
		t.Fatalf("spares after %d was taken: %v (before %v), want a new one in its place", taken, after, before)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the spare's sandbox gone", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", taken))
		return err != nil && dirsIn(rt) == 0
	})
	// local.CloseWarmPools ends the spares too: nothing of ours runs after.
	local.ClosePools(ctx)
	waitFor(t, "no spare supervisor left after local.CloseWarmPools", func() bool { return len(spareShims(t)) == 0 })
}

// TestLocalSpareEndsWithCaller: a spare supervisor ends with the process
// that started it, even SIGKILLed (its socket's EOF): nothing is left
// running when a program that created sandboxes dies.
func TestLocalSpareEndsWithCaller(t *testing.T) {
	if rt := os.Getenv("CS_SPARE_OWNER_RT"); rt != "" {
		spareOwner(t, rt)
		return
	}
	t.Setenv(local.SpareSupervisorEnv, "1")
	rt := ownRuntimeDir(t, "cs-pool-")
	cmd, sc := startTestChild(t, "TestLocalSpareEndsWithCaller", "CS_SPARE_OWNER_RT="+rt)
	var pids []int
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "spare "); ok {
			if pid, err := strconv.Atoi(rest); err == nil {
				pids = append(pids, pid)
			}
		}
		if sc.Text() == "spares ready" {
			break
		}
	}
	if len(pids) == 0 {
		t.Fatal("the owner had no spare supervisor")
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	for _, pid := range pids {
		waitFor(t, fmt.Sprintf("spare supervisor %d to end with its owner", pid), func() bool {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			return err != nil || !strings.HasPrefix(string(b), "code-sandboxes-shim")
		})
	}
}

// spareOwner creates three sandboxes in rt and closes them, prints its
// spare supervisors' pids and waits to be killed.
func spareOwner(t *testing.T, rt string) {
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}
	for range 3 {
		sb, err := sandboxes.Create(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	local.WaitSpares()
	for _, pid := range spareShims(t) {
		fmt.Printf("spare %d\n", pid)
	}
	fmt.Println("spares ready")
	time.Sleep(time.Minute)
}
