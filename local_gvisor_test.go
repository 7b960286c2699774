//go:build linux

package sandboxes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// requireGVisor skips (fails under CI=true) where the local variant can't
// run gVisor sandboxes: it needs root and runsc.
func requireGVisor(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	_, err := exec.LookPath("runsc")
	testdep.Require(t, err == nil, "gVisor's runsc (apt-get install runsc; make deps)")
	testdep.Require(t, os.Geteuid() == 0, "root (isolation gvisor on the local variant runs runsc as root)")
}

func gvisorConfig(t *testing.T) sandboxes.Config {
	cfg := localConfig(t)
	cfg.Isolation = sandboxes.IsolationGVisor
	return cfg
}

// The kernel code inside sees is gVisor's, not the host's: a different
// uname release and gVisor's fixed /proc/version.
func TestLocalGVisorKernel(t *testing.T) {
	requireGVisor(t)
	host, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	sb := newLocal(t, func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Commands().Run(ctx, "uname -r; cat /proc/version; id -u; id -g")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout, strings.TrimSpace(string(host))) {
		t.Fatalf("the sandbox sees the host's kernel %s:\n%s", host, res.Stdout)
	}
	// gVisor's Sentry reports a fixed kernel: 4.4.0, built "Sun Jan 10
	// 15:06:54 PST 2016" (pkg/sentry/kernel/version.go).
	if !strings.Contains(res.Stdout, "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016") {
		t.Fatalf("the sandbox's /proc/version is not gVisor's:\n%s\n%s", res.Stdout, res.Stderr)
	}
	if !strings.HasSuffix(strings.TrimSpace(res.Stdout), "1000\n100") {
		t.Fatalf("want uid 1000 gid 100 inside, got:\n%s", res.Stdout)
	}
	if info, err := sb.Info(ctx); err != nil || info.Isolation != "gvisor" {
		t.Errorf("Info: isolation %q (%v), want gvisor", info.Isolation, err)
	}
	ex := runOut(t, sb, "import platform; platform.release()")
	if ex.Error != nil || strings.Contains(ex.Text(), strings.TrimSpace(string(host))) {
		t.Fatalf("python sees %q (error %v), want gVisor's release", ex.Text(), ex.Error)
	}
	// The same call under namespaces sees the host's kernel: the test can
	// tell the two apart.
	plain := newLocal(t, nil)
	res, err = plain.Commands().Run(ctx, "uname -r")
	if err != nil || strings.TrimSpace(res.Stdout) != strings.TrimSpace(string(host)) {
		t.Fatalf("namespaces sandbox: uname -r = %q (%v), want the host's %s", res.Stdout, err, host)
	}
}

func TestLocalGVisorConformance(t *testing.T) {
	requireGVisor(t)
	sandboxestest.Require(t, hasRich(), "Debian's python3-numpy, python3-matplotlib and python3-pandas (make deps)")
	sandboxestest.Run(t, gvisorConfig(t), sandboxestest.Options{Rich: true})
}

// Without runsc the level is refused with the reason, never replaced by
// namespaces.
func TestLocalGVisorRefusedWithoutRunsc(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	t.Setenv("CODE_SANDBOXES_RUNSC", "/nonexistent/runsc")
	_, err := sandboxes.Create(context.Background(), gvisorConfig(t))
	if !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "runsc") {
		t.Fatalf("Create without runsc: %v, want ErrNotSupported naming runsc", err)
	}
	// A variant without the level refuses it before doing anything.
	e2b := sandboxes.Config{Variant: "e2b", Isolation: sandboxes.IsolationGVisor}
	if _, err := sandboxes.Create(context.Background(), e2b); !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), `no isolation level "gvisor"`) {
		t.Fatalf("e2b with isolation gvisor: %v, want ErrNotSupported", err)
	}
	cfg := gvisorConfig(t)
	cfg.Isolation = "vm"
	if _, err := sandboxes.Create(context.Background(), cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) {
		t.Fatalf("Isolation vm: %v, want ErrInvalidConfig", err)
	}
}

// Network all and allowlist under gVisor keep the egress policy: the same
// attacks as under namespaces (TestLocalNetworkAll, …Allowlist, …Update).
func TestLocalGVisorNetworkAll(t *testing.T) {
	requireGVisor(t)
	testInternet(t)
	checkNetworkAll(t, newLocal(t, func(c *sandboxes.Config) {
		c.Isolation = sandboxes.IsolationGVisor
		c.NetworkPolicy = sandboxes.NetworkAll
	}))
}

func TestLocalGVisorNetworkAllowlist(t *testing.T) {
	requireGVisor(t)
	n := testInternet(t)
	checkNetworkAllowlist(t, n, newLocal(t, func(c *sandboxes.Config) {
		allowlistConfig(c)
		c.Isolation = sandboxes.IsolationGVisor
	}))
}

func TestLocalGVisorNetworkUpdate(t *testing.T) {
	requireGVisor(t)
	testInternet(t)
	gv := func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor }
	checkNetworkUpdate(t, newLocal(t, func(c *sandboxes.Config) { gv(c); c.NetworkPolicy = sandboxes.NetworkAll }), newLocal(t, gv))
}

// The rootfs choice holds under gVisor: a sandbox of the python
// environment runs on its rootfs (its /usr/bin, not the host's), on
// gVisor's kernel, and the conformance suite passes there.
func TestLocalGVisorEnvironment(t *testing.T) {
	requireGVisor(t)
	_, b := pythonEnv(t)
	want, err := os.ReadDir(filepath.Join(b.Rootfs(), "usr/bin"))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.ReadDir("/usr/bin")
	if len(want) == len(host) {
		t.Fatal("the rootfs's /usr/bin has as many entries as the host's: this test could not tell them apart")
	}
	cfg := pythonEnvConfig(t)
	cfg.Isolation = sandboxes.IsolationGVisor
	sb := newLocal(t, func(c *sandboxes.Config) { *c = cfg })
	ex := runOut(t, sb, "import os; print(len(os.listdir('/usr/bin')), os.uname().release)")
	if got := strings.TrimSpace(ex.Stdout()); got != fmt.Sprintf("%d 4.4.0", len(want)) {
		t.Fatalf("in the sandbox: %q (error %v), want %d entries in /usr/bin and gVisor's 4.4.0", got, ex.Error, len(want))
	}
	sandboxestest.Run(t, cfg, sandboxestest.Options{Rich: true})
}

// TestLocalGVisorStaleCleaned: a gVisor sandbox whose supervisor died
// (SIGKILL) is ended by Sweep: gVisor's sandbox process, its cgroups and
// its directory go.
func TestLocalGVisorStaleCleaned(t *testing.T) {
	requireGVisor(t)
	sb := newLocal(t, func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor })
	dir := local.SandboxDir(runtimeDir(t), sb.ID())
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		ShimPid  int      `json:"shim_pid"`
		AgentPid int      `json:"agent_pid"`
		Cgroups  []string `json:"cgroups"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Cgroups) == 0 {
		t.Fatal("no cgroups recorded for the gVisor sandbox")
	}
	if err := syscall.Kill(rec.ShimPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Until the supervisor is reaped (by this process, its creator): a
	// zombie still looks alive to the sweep.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", rec.ShimPid)); err != nil {
			break
		}
	}
	if syscall.Kill(rec.AgentPid, 0) != nil {
		t.Fatal("gVisor's sandbox ended with its supervisor: this test could not see the sweep end it")
	}
	if n, err := sandboxes.Sweep(context.Background(), localConfig(t)); err != nil || n < 1 {
		t.Fatalf("Sweep: %d %v", n, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its directory is still there: %v", err)
	}
	// Sweep returns once the Sentry has ended (a zombie until init reaps
	// it): a directory gone means nothing of the sandbox runs.
	if syscall.Kill(rec.AgentPid, 0) == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", rec.AgentPid)); !strings.Contains(string(st), ") Z ") {
			t.Errorf("gVisor's sandbox process (pid %d) still runs after Sweep returned", rec.AgentPid)
		}
	}
	for _, d := range rec.Cgroups {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left behind", d)
		}
	}
}
