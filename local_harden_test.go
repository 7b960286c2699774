package sandboxes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// unprivEnv marks the re-run of this test binary as an ordinary user.
const unprivEnv = "CODE_SANDBOXES_TEST_UNPRIVILEGED_RT"

// TestLocalFailsClosedWithoutCgroup: as a user without a writable cgroup
// the default limits (memory, pids) cannot be enforced, so Create fails
// with a reason and the way out (Unlimited) instead of starting a sandbox
// without them (the supervisor used to retry without the pids limit); with
// Unlimited asked for explicitly it runs. As root, the test re-runs itself
// as nobody; as an ordinary user it runs directly where cgroups are not
// writable.
func TestLocalFailsClosedWithoutCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	if rt := os.Getenv(unprivEnv); rt != "" {
		failsClosed(t, rt)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("run as root: the test re-runs itself as nobody, a user with no writable cgroup")
	}
	setpriv, err := exec.LookPath("setpriv")
	sandboxestest.Require(t, err == nil, "setpriv (util-linux) is needed to run as nobody")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "cs-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandboxes.test")
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	outf, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err == nil {
		_, err = io.Copy(outf, in)
		outf.Close()
	}
	in.Close()
	if err != nil {
		t.Fatal(err)
	}
	rt := filepath.Join(dir, "rt")
	if err := os.Mkdir(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(rt, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin,
		"-test.run", "^TestLocalFailsClosedWithoutCgroup$", "-test.v", "-test.count=1")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "TMPDIR=" + rt, unprivEnv + "=" + rt}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestLocalFailsClosedWithoutCgroup") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "RESULT") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

func failsClosed(t *testing.T, rt string) {
	base := sandboxes.Config{Variant: "local", Options: local.Options{RuntimeDir: rt}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name        string
		memory, pid int64
	}{{"defaults", 0, 0}, {"default pids", sandboxes.Unlimited, 0}, {"default memory", 0, sandboxes.Unlimited}} {
		cfg := base
		cfg.Memory, cfg.Pids = c.memory, c.pid
		sb, err := sandboxes.Create(ctx, cfg)
		if err == nil {
			_ = sb.Close()
			t.Fatalf("%s: a sandbox started without its limits (no writable cgroup as uid %d)", c.name, os.Geteuid())
		}
		if !strings.Contains(err.Error(), "Unlimited") {
			t.Errorf("%s: the error does not say how to run without limits: %v", c.name, err)
		}
		t.Logf("RESULT %s refused: %v", c.name, err)
	}
	cfg := base
	cfg.Memory, cfg.Pids = sandboxes.Unlimited, sandboxes.Unlimited
	sb, err := sandboxes.Create(ctx, cfg)
	if errors.Is(err, sandboxes.ErrNotSupported) {
		testdep.Require(t, false, "unprivileged sandboxes: "+err.Error())
	}
	if err != nil {
		t.Fatalf("Unlimited asked for explicitly: %v", err)
	}
	defer sb.Close()
	ex, err := sb.RunCode(ctx, "6 * 7")
	if err != nil || ex.Text() != "42" {
		t.Fatalf("RunCode: %v %+v", err, ex)
	}
	t.Logf("RESULT Unlimited: runs")
}

// hostUIDOf returns the host uid the sandbox's processes run as (from its
// agent's /proc status, via the record).
func hostUIDOf(t *testing.T, sb *sandboxes.Sandbox) int {
	t.Helper()
	return hostUIDIn(t, runtimeDir(t), sb)
}

// hostUIDIn is hostUIDOf for a sandbox of runtime directory rt.
func hostUIDIn(t *testing.T, rt string, sb *sandboxes.Sandbox) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(local.SandboxDir(rt, sb.ID()), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		AgentPid int `json:"agent_pid"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", rec.AgentPid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(st)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" {
			uid, _ := strconv.Atoi(f[1])
			return uid
		}
	}
	t.Fatalf("no Uid line:\n%s", st)
	return 0
}

// TestLocalHostUIDPerSandbox: as root every sandbox maps to a host uid of
// its own (they all were 101000), outside /etc/subuid's usual ranges, and
// a sandbox's uid is free again once it ended.
func TestLocalHostUIDPerSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	if os.Geteuid() != 0 {
		t.Skip("as an ordinary user every sandbox maps to the caller's own uid")
	}
	a, b := newLocal(t, nil), newLocal(t, nil)
	ua, ub := hostUIDOf(t, a), hostUIDOf(t, b)
	if ua == ub || ua < 0x70000000 || ub < 0x70000000 {
		t.Fatalf("host uids %d and %d: want two distinct ones of the sandboxes' own range", ua, ub)
	}
	// Inside, both are uid 1000.
	for _, sb := range []*sandboxes.Sandbox{a, b} {
		if ex := runOut(t, sb, "import os; print(os.getuid(), os.getgid())"); ex.Stdout() != "1000 100\n" {
			t.Fatalf("inside: %q", ex.Stdout())
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	c := newLocal(t, nil)
	if uc := hostUIDOf(t, c); uc == ub {
		t.Fatalf("two live sandboxes share host uid %d", uc)
	}
	t.Logf("host uids: %d, %d, then %d", ua, ub, hostUIDOf(t, c))
}

// TestLocalHostUIDAcrossRuntimeDirs: sandboxes of two runtime directories
// (two callers, a serve beside a library user) never share a host uid:
// they both got the range's first one when each directory allocated
// alone, and then shared what the kernel counts per user (CI: one
// holding every inotify instance of its user left serve's sandbox none).
func TestLocalHostUIDAcrossRuntimeDirs(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	if os.Geteuid() != 0 {
		t.Skip("as an ordinary user every sandbox maps to the caller's own uid")
	}
	rt1, rt2 := ownRuntimeDir(t, "cs-runtime-a-"), ownRuntimeDir(t, "cs-runtime-b-")
	a := newLocal(t, func(c *sandboxes.Config) { setLocal(c, func(o *local.Options) { o.RuntimeDir = rt1 }) })
	defer a.Close()
	b := newLocal(t, func(c *sandboxes.Config) { setLocal(c, func(o *local.Options) { o.RuntimeDir = rt2 }) })
	defer b.Close()
	ua, ub := hostUIDIn(t, rt1, a), hostUIDIn(t, rt2, b)
	if ua == ub {
		t.Fatalf("sandboxes of two runtime directories share host uid %d", ua)
	}
	// Nor does either share one with a sandbox of the tests' own directory.
	c := newLocal(t, nil)
	if uc := hostUIDOf(t, c); uc == ua || uc == ub {
		t.Fatalf("host uid %d of the shared runtime directory's sandbox is also %d's or %d's", uc, ua, ub)
	}
	t.Logf("host uids: %d, %d, %d", ua, ub, hostUIDOf(t, c))
}

// pipeEnds is a cell that reports each pipe its process holds: the pipe's
// inode and the access modes of the descriptors it has for it.
const pipeEnds = `import os, json
ends = {}
for f in os.listdir('/proc/self/fd'):
    try:
        t = os.readlink('/proc/self/fd/' + f)
        flags = int([l for l in open('/proc/self/fdinfo/' + f) if l.startswith('flags:')][0].split()[1], 8)
    except OSError:
        continue
    if t.startswith('pipe:'):
        ends.setdefault(t, []).append(['r', 'w', 'rw'][flags & 3])
print(json.dumps(ends))`

// A kernel holds only its own end of each of its pipes, never the
// agent's: the agent reads and writes its ends raw (internal/rawio), and
// O_NONBLOCK lives in the open file description, so user code sharing one
// of them could clear it and stall the agent. Both kernels: the default
// one (stage 1 starts it) and a second context's (the agent does).
func TestLocalKernelHoldsOneEndPerPipe(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sb := newLocal(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	second, err := sb.CreateContext(ctx, sandboxes.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]sandboxes.RunOption{"default": nil, "second": {sandboxes.InContext(second)}} {
		ex := runOut(t, sb, pipeEnds, opts...)
		var ends map[string][]string
		if ex.Error != nil || json.Unmarshal([]byte(ex.Stdout()), &ends) != nil || len(ends) < 4 {
			t.Fatalf("%s kernel: %q %v", name, ex.Stdout(), ex.Error)
		}
		for pipe, modes := range ends {
			for _, m := range modes {
				if m != modes[0] || m == "rw" {
					t.Errorf("%s kernel holds both ends of %s (%v)", name, pipe, modes)
				}
			}
		}
	}
}
