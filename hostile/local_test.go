package hostile_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/hostile"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// rt is this test binary's runtime directory: every local sandbox of the
// package lives there, and it must be empty when the tests end.
var rt string

func TestMain(m *testing.M) {
	// (Importing sandboxes already made this binary the sandbox agent and
	// supervisor when re-executed as such.)
	if helperMain() {
		return
	}
	d, err := os.MkdirTemp("", "cs-hostile-")
	if err != nil {
		panic(err)
	}
	rt = d
	code := m.Run()
	// Nothing lingers: every sandbox was closed, killed or expired, and its
	// supervisor removed its directory.
	deadline := time.Now().Add(20 * time.Second)
	var left []string
	for {
		left = left[:0]
		ents, _ := os.ReadDir(rt)
		for _, e := range ents {
			left = append(left, e.Name())
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(left) != 0 {
		fmt.Fprintln(os.Stderr, "LINGERING: sandboxes left in the runtime dir:", strings.Join(left, ", "))
		for _, id := range left {
			_, _ = sandboxes.Kill(ctxBG(30*time.Second), localCfg(), id, sandboxes.ListOptions{})
		}
		code = 1
	}
	for id, r := range allRecords() {
		if err := goneErr(r); err != nil {
			fmt.Fprintf(os.Stderr, "LINGERING: sandbox %s: %v\n", id, err)
			code = 1
		}
	}
	os.RemoveAll(rt)
	os.Exit(code)
}

func localCfg() sandboxes.Config {
	return sandboxes.Config{Variant: "local", Options: local.Options{RuntimeDir: rt}}
}

func requireLocal(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	err := isolate.CheckSupport()
	sandboxestest.Require(t, err == nil, fmt.Sprintf("local sandboxes are not supported here: %v", err))
}

// rec is what the local variant keeps in <runtime>/<id>/state.json.
type rec struct {
	ID       string   `json:"id"`
	ShimPid  int      `json:"shim_pid"`
	AgentPid int      `json:"agent_pid"`
	Token    string   `json:"token"`
	Cgroups  []string `json:"cgroups"`
}

var (
	recMu   sync.Mutex
	records = map[string]rec{}
)

func readRec(t testing.TB, dir, id string) rec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(local.SandboxDir(dir, id), "state.json"))
	if err != nil {
		t.Fatalf("record of %s: %v", id, err)
	}
	var r rec
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	recMu.Lock()
	records[id] = r
	recMu.Unlock()
	return r
}

func allRecords() map[string]rec {
	recMu.Lock()
	defer recMu.Unlock()
	out := map[string]rec{}
	for k, v := range records {
		out[k] = v
	}
	return out
}

// goneErr says what of a sandbox is still on the host: its supervisor, its
// agent, its cgroups, its directory.
func goneErr(r rec) error {
	if isOurs(r.ShimPid, "code-sandboxes-shim") {
		return fmt.Errorf("supervisor (pid %d) still runs", r.ShimPid)
	}
	if isOurs(r.AgentPid, "code-sandboxes-agent") {
		return fmt.Errorf("agent (pid %d) still runs", r.AgentPid)
	}
	// Under isolation gvisor the recorded pid is gVisor's sandbox (Sentry).
	if isOurs(r.AgentPid, "runsc-sandbox") {
		return fmt.Errorf("gVisor sandbox (pid %d) still runs", r.AgentPid)
	}
	for _, d := range r.Cgroups {
		if _, err := os.Stat(d); err == nil {
			return fmt.Errorf("cgroup %s still exists", d)
		}
	}
	return nil
}

func isOurs(pid int, name string) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.HasPrefix(string(b), name) {
		return false
	}
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return !strings.Contains(string(st), ") Z ")
}

// waitGone waits (bounded) until nothing of sandbox id is left.
func waitGone(t *testing.T, dir, id string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	r, known := allRecords()[id]
	for {
		_, serr := os.Stat(local.SandboxDir(dir, id))
		var gerr error
		if known {
			gerr = goneErr(r)
		}
		if os.IsNotExist(serr) && gerr == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s lingers 20s after it ended: dir %v, %v", id, serr, gerr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func localOptions() hostile.Options {
	return hostile.Options{
		SameHost: true,
		Limits:   true,
		Networks: networks(),
		Created:  func(t *testing.T, sb *sandboxes.Sandbox) { readRec(t, rt, sb.ID()) },
		Secrets: func(t *testing.T, sb *sandboxes.Sandbox) []string {
			return []string{readRec(t, rt, sb.ID()).Token}
		},
		Gone: func(t *testing.T, id string) { waitGone(t, rt, id) },
		// The egress stack runs in the sandbox's supervisor.
		NetworkHelper: func(t *testing.T, sb *sandboxes.Sandbox) int { return readRec(t, rt, sb.ID()).ShimPid },
	}
}

// TestHostileLocal runs the hostile-code suite on the local variant.
func TestHostileLocal(t *testing.T) {
	requireLocal(t)
	hostile.Run(t, localCfg(), localOptions())
	for _, r := range hostile.Results() {
		t.Logf("%-60s %s", r.Case, r.Outcome)
	}
}

// TestHostileLocalGVisor runs the hostile-code suite on the local variant
// under isolation gvisor (root and runsc; missing ones fail under CI=true).
func TestHostileLocalGVisor(t *testing.T) {
	requireLocal(t)
	_, err := exec.LookPath("runsc")
	sandboxestest.Require(t, err == nil, "gVisor's runsc (apt-get install runsc; make deps)")
	sandboxestest.Require(t, os.Geteuid() == 0, "root (isolation gvisor on the local variant runs runsc as root)")
	cfg := localCfg()
	cfg.Isolation = sandboxes.IsolationGVisor
	o := localOptions()
	o.UserSpaceKernel = true
	o.AgentOwnUID = true
	o.HostCPU = func(t *testing.T, sb *sandboxes.Sandbox) time.Duration {
		// cpuacct.usage (v1, ns) or cpu.stat's usage_usec (v2) of the
		// cgroup runsc put the whole gVisor sandbox in.
		for _, d := range readRec(t, rt, sb.ID()).Cgroups {
			if b, err := os.ReadFile(filepath.Join(d, "cpuacct.usage")); err == nil {
				var ns int64
				fmt.Sscan(string(b), &ns)
				return time.Duration(ns)
			}
			if b, err := os.ReadFile(filepath.Join(d, "cpu.stat")); err == nil {
				var us int64
				if _, err := fmt.Sscanf(string(b), "usage_usec %d", &us); err == nil {
					return time.Duration(us) * time.Microsecond
				}
			}
		}
		t.Fatalf("sandbox %s: no cgroup with CPU accounting in its record", sb.ID())
		return 0
	}
	hostile.Run(t, cfg, o)
	for _, r := range hostile.Results() {
		t.Logf("%-60s %s", r.Case, r.Outcome)
	}
}

// networks: the network policies the suite attacks here; its test internet
// needs root (missing root fails under CI=true).
func networks() []string {
	if os.Geteuid() != 0 {
		if testdep.CI() {
			panic("the hostile suite's network cases need root (CI=true)")
		}
		return nil
	}
	return []string{sandboxes.NetworkAll, sandboxes.NetworkAllowlist}
}
