//go:build linux

package sandboxes_test

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	mobyclient "github.com/moby/moby/client"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/docker"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
	"github.com/code-sandboxes/code-sandboxes/internal/testpypi"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// dockerStore returns the store dir to put in Config.EnvironmentDir, with
// the built-in "python" environment built (on first use: minutes).
func dockerStore(t *testing.T) string {
	t.Helper()
	pythonEnv(t)
	return envStoreDir
}

// engine returns a client of the local Docker engine, or skips (fails
// with CI=true) when there is none.
func engine(t *testing.T) *mobyclient.Client {
	t.Helper()
	c, err := mobyclient.New(mobyclient.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = c.Ping(ctx, mobyclient.PingOptions{NegotiateAPIVersion: true})
	}
	sandboxestest.Require(t, err == nil, fmt.Sprintf("a Docker engine (make test starts dockerd through scripts/with-dockerd.sh): %v", err))
	t.Cleanup(func() { c.Close() })
	return c
}

// requireStatic: the docker variant bind-mounts this test binary into each
// container as its agent, which needs a static build.
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
	defer f.Close()
	static := !slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	sandboxestest.Require(t, static, "a static test binary: run the docker tests with CGO_ENABLED=0 (make test does)")
}

func dockerConfig(t *testing.T) sandboxes.Config {
	t.Helper()
	if testing.Short() {
		t.Skip("creates containers")
	}
	requireStatic(t)
	engine(t)
	return sandboxes.Config{Variant: "docker", EnvironmentDir: dockerStore(t), BuildOutput: testWriter{t}}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func newDocker(t *testing.T, mod func(*sandboxes.Config)) *sandboxes.Sandbox {
	t.Helper()
	cfg := dockerConfig(t)
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

// containerOf finds a sandbox's container by its id label.
func containerOf(t *testing.T, c *mobyclient.Client, id string) (container.InspectResponse, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.ContainerList(ctx, mobyclient.ContainerListOptions{All: true,
		Filters: mobyclient.Filters{}.Add("label", "code-sandboxes.id="+id)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Items) == 0 {
		return container.InspectResponse{}, false
	}
	insp, err := c.ContainerInspect(ctx, res.Items[0].ID, mobyclient.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return container.InspectResponse{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return insp.Container, true
}

// sandboxDir is the host-side directory of a sandbox, from its container's
// run mount.
func sandboxDir(t *testing.T, ct container.InspectResponse) string {
	t.Helper()
	for _, m := range ct.Mounts {
		if m.Destination == "/run/code-sandboxes" {
			return filepath.Dir(m.Source)
		}
	}
	t.Fatalf("container %s has no /run/code-sandboxes mount: %+v", ct.ID, ct.Mounts)
	return ""
}

// waitGone waits until the sandbox's container and directory are gone.
func waitGone(t *testing.T, c *mobyclient.Client, id, dir string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, exists := containerOf(t, c, id)
		_, serr := os.Stat(dir)
		if !exists && errors.Is(serr, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: container exists %v, directory %s: %v", within, exists, dir, serr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDockerConformance(t *testing.T) {
	cfg := dockerConfig(t)
	sandboxestest.Run(t, cfg, sandboxestest.Options{Rich: true})
}

func TestDockerContainerSettings(t *testing.T) {
	cfg := dockerConfig(t)
	c := engine(t)
	tag := fmt.Sprintf("s%d", time.Now().UnixNano())
	sb := newDocker(t, func(cfg *sandboxes.Config) {
		cfg.Name = "settings-" + tag
		cfg.Tags = map[string]string{"suite": tag, "team": "ai"}
		cfg.Memory = 256 << 20
		cfg.CPU = 0.5
		cfg.Pids = 200
		cfg.Env = map[string]string{"CS_USER_VAR": "mine"}
	})
	ct, ok := containerOf(t, c, sb.ID())
	if !ok {
		t.Fatal("no container labelled with the sandbox's id")
	}
	l := ct.Config.Labels
	for k, want := range map[string]string{
		"created-by": "code-sandboxes", "code-sandboxes.id": sb.ID(), "code-sandboxes.name": "settings-" + tag,
		"code-sandboxes.tag.suite": tag, "code-sandboxes.tag.team": "ai", "code-sandboxes.network": "none",
		"code-sandboxes.environment": "python",
	} {
		if l[k] != want {
			t.Errorf("label %s = %q, want %q", k, l[k], want)
		}
	}
	if end, err := time.Parse(time.RFC3339, l["code-sandboxes.end-at"]); err != nil || time.Until(end) < 23*time.Hour {
		t.Errorf("label end-at = %q (%v), want about 24h from now", l["code-sandboxes.end-at"], err)
	}
	if len(l["code-sandboxes.env-build"]) != 64 {
		t.Errorf("label env-build = %q, want a build id", l["code-sandboxes.env-build"])
	}
	if !strings.HasPrefix(ct.Config.Image, "code-sandboxes-env:") || ct.Config.Hostname != "sandbox" {
		t.Errorf("image %q hostname %q", ct.Config.Image, ct.Config.Hostname)
	}
	hc := ct.HostConfig
	if hc.Memory != 256<<20 || hc.MemorySwap != 256<<20 || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 200 {
		t.Errorf("limits: memory %d swap %d nanocpus %d pids %v", hc.Memory, hc.MemorySwap, hc.NanoCPUs, hc.PidsLimit)
	}
	if !hc.ReadonlyRootfs || !hc.AutoRemove || string(hc.NetworkMode) != "none" || hc.Privileged {
		t.Errorf("readonly %v autoremove %v network %q privileged %v", hc.ReadonlyRootfs, hc.AutoRemove, hc.NetworkMode, hc.Privileged)
	}
	if !slices.Contains(hc.CapDrop, "ALL") || len(hc.CapAdd) != 3 || !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
		t.Errorf("capdrop %v capadd %v securityopt %v", hc.CapDrop, hc.CapAdd, hc.SecurityOpt)
	}
	// The limits as the sandbox sees them (cgroup v1 or v2).
	ex := runOut(t, sb, `import os
def first(*paths):
    for p in paths:
        if os.path.exists(p):
            return open(p).read().strip()
print(first('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'),
      first('/sys/fs/cgroup/pids.max', '/sys/fs/cgroup/pids/pids.max'),
      os.environ.get('CS_USER_VAR'), open('/etc/hostname').read().strip())`)
	if got := strings.TrimSpace(ex.Stdout()); got != fmt.Sprint(256<<20, " 200 mine sandbox") {
		t.Errorf("inside: %q (error %v)", got, ex.Error)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	info, err := sb.Info(ctx)
	if err != nil || info.Name != "settings-"+tag || info.Tags["team"] != "ai" || info.Memory != 256<<20 || info.CPUs != 0.5 || info.Network != "none" || info.Variant != "docker" {
		t.Errorf("info = %+v, %v", info, err)
	}
	list, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{Tags: map[string]string{"suite": tag}})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID() {
		t.Fatalf("list by tag = %+v, %v", list, err)
	}
	again, err := sandboxes.Get(ctx, cfg, "settings-"+tag)
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := again.RunCode(ctx, "6 * 7"); err != nil || ex.Text() != "42" {
		t.Fatalf("reconnected: %v %v", ex, err)
	}
	_ = again.Detach()
	dir := sandboxDir(t, ct)
	killed, err := sandboxes.Kill(ctx, cfg, "", sandboxes.ListOptions{Tags: map[string]string{"suite": tag}})
	if err != nil || len(killed) != 1 || killed[0] != sb.ID() {
		t.Fatalf("kill by tag = %v, %v", killed, err)
	}
	waitGone(t, c, sb.ID(), dir, 10*time.Second)
	if _, err := sandboxes.Get(ctx, cfg, sb.ID()); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("get killed = %v, want ErrNotFound", err)
	}
	if _, err := sandboxes.Kill(ctx, cfg, sb.ID(), sandboxes.ListOptions{}); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("kill killed = %v, want ErrNotFound", err)
	}
}

func TestDockerNetwork(t *testing.T) {
	none := newDocker(t, nil)
	// Only loopback, and no route anywhere.
	ex := runOut(t, none, `import socket
ifaces = sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:])
try:
    socket.create_connection(('192.0.2.1', 80), timeout=3)
    reached = True
except OSError:
    reached = False
print(ifaces, reached)`)
	if got := strings.TrimSpace(ex.Stdout()); got != "['lo'] False" {
		t.Errorf("network none: %q (error %v)", got, ex.Error)
	}
	// Network all: not the engine's bridge (eth0) but our TUN device.
	all := newDocker(t, func(c *sandboxes.Config) { c.NetworkPolicy = sandboxes.NetworkAll })
	ex = runOut(t, all, `ifaces = sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:])
routes = [l.split()[1] for l in open('/proc/net/route').readlines()[1:]]
print(ifaces, '00000000' in routes)`)
	if got := strings.TrimSpace(ex.Stdout()); got != "['lo', 'tun0'] True" {
		t.Errorf("network all: interfaces and default route: %q (error %v)", got, ex.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := dockerConfig(t)
	cfg.NetworkPolicy, cfg.Options = sandboxes.NetworkAll, docker.Options{Runtime: "runsc"}
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrNotSupported) {
		t.Errorf("network all with a runtime of its own: %v, want ErrNotSupported", err)
	}
}

// TestDockerNetworkAll: as TestLocalNetworkAll, on docker: the internet
// yes, the host (its docker0 address included) and metadata no.
func TestDockerNetworkAll(t *testing.T) {
	cfg := dockerConfig(t)
	testInternet(t)
	cfg.NetworkPolicy = sandboxes.NetworkAll
	checkNetworkAll(t, newDocker(t, func(c *sandboxes.Config) { *c = cfg }))
}

// TestDockerNetworkUpdate: as TestLocalNetworkUpdate, on docker.
func TestDockerNetworkUpdate(t *testing.T) {
	cfg := dockerConfig(t)
	testInternet(t)
	all := cfg
	all.NetworkPolicy = sandboxes.NetworkAll
	checkNetworkUpdate(t, newDocker(t, func(c *sandboxes.Config) { *c = all }), newDocker(t, func(c *sandboxes.Config) { *c = cfg }))
}

// TestDockerNetworkAllowlist: as TestLocalNetworkAllowlist, on docker.
func TestDockerNetworkAllowlist(t *testing.T) {
	cfg := dockerConfig(t)
	n := testInternet(t)
	allowlistConfig(&cfg)
	checkNetworkAllowlist(t, n, newDocker(t, func(c *sandboxes.Config) { *c = cfg }))
}

func TestDockerSweep(t *testing.T) {
	cfg := dockerConfig(t)
	c := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A sandbox whose end has passed (as the record says: SetTimeout's end
	// wins over the label) but whose agent still runs (wedged, say) is
	// removed by the next List.
	wedged := newDocker(t, nil)
	ct, ok := containerOf(t, c, wedged.ID())
	if !ok {
		t.Fatal("no container")
	}
	dir := sandboxDir(t, ct)
	var rec map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "record.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec["end_at"] = time.Now().Add(-time.Minute)
	b, _ = json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(dir, "record.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range list {
		if i.ID == wedged.ID() {
			t.Errorf("expired sandbox still listed: %+v", i)
		}
	}
	// List only reads; Sweep removes.
	if _, err := sandboxes.Sweep(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, wedged.ID(), dir, 10*time.Second)

	// A sandbox whose lifetime ends: its agent exits, the engine removes the
	// container (AutoRemove), and the next Sweep removes its directory.
	// (Long enough to find its container first on a busy host: the
	// lifetime runs from the agent's start, before Create returns.)
	short := newDocker(t, func(c *sandboxes.Config) { c.MaxLifetime = 8 * time.Second })
	ct, ok = containerOf(t, c, short.ID())
	if !ok {
		t.Fatal("no container")
	}
	dir = sandboxDir(t, ct)
	deadline := time.Now().Add(40 * time.Second)
	for {
		if _, exists := containerOf(t, c, short.ID()); !exists {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the container outlived its sandbox's 2s lifetime by 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := sandboxes.Sweep(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// The directory of a container that ended goes at once when its
	// record says the end passed.
	waitGone(t, c, short.ID(), dir, 5*time.Second)
}

func TestDockerAgentSocketIsSafe(t *testing.T) {
	sb := newDocker(t, nil)
	ex := runOut(t, sb, `import errno, os, socket
def attempt(f):
    try:
        f()
        return 'done'
    except OSError as e:
        return 'denied' if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else errno.errorcode.get(e.errno, str(e))
d = '/run/code-sandboxes'
def plant():
    s = socket.socket(socket.AF_UNIX)
    s.bind(d + '/evil.sock')
def reach():
    s = socket.socket(socket.AF_UNIX)
    s.connect(d + '/agent.sock')
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())
init = dict(l.split(':', 1) for l in open('/proc/1/status').read().splitlines())
print(sorted(os.listdir(d)))
print(attempt(lambda: os.unlink(d + '/agent.sock')), attempt(lambda: os.rename(d + '/agent.sock', d + '/x')),
      attempt(lambda: open(d + '/config.json', 'w')), attempt(plant), attempt(lambda: os.chmod(d, 0o777)))
print(attempt(lambda: open('/proc/1/environ').read()), attempt(lambda: os.readlink('/proc/1/exe')),
      attempt(lambda: os.setuid(0)), attempt(lambda: open('/usr/local/libexec/code-sandboxes-agent', 'ab')), attempt(reach))
print(status['CapEff'].strip(), status['NoNewPrivs'].strip(), init['Uid'].split()[0:2], init['CapEff'].strip(), os.getgroups())`)
	// As root, the host side is the only one that can even connect to the
	// agent's socket (0600); otherwise the token is the gate.
	reach := "done"
	if os.Geteuid() == 0 {
		reach = "denied"
	}
	// setuid(0): EINVAL, uid 0 does not exist in the sandbox's user
	// namespace (only uid 1000 is mapped, to the sandbox's host uid).
	want := "['agent.sock']\n" +
		"denied denied denied denied denied\n" +
		"denied denied EINVAL denied " + reach + "\n" +
		"0000000000000000 1 ['1000', '1000'] 0000000000000000 []\n"
	if ex.Stdout() != want {
		t.Errorf("inside the sandbox:\n%s\nwant:\n%s(error %v)", ex.Stdout(), want, ex.Error)
	}
	// The sandbox still answers: its socket is intact.
	if ex := runOut(t, sb, "1 + 1"); ex.Text() != "2" {
		t.Errorf("after the attempts: %q %v", ex.Text(), ex.Error)
	}
}

func TestDockerCreateFailureCleansUp(t *testing.T) {
	cfg := dockerConfig(t)
	c := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt := "/run/code-sandboxes-docker"
	if d := os.Getenv("CODE_SANDBOXES_DOCKER_RUNTIME_DIR"); d != "" {
		rt = d
	}
	entries := func() []string {
		ents, _ := os.ReadDir(rt)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}

	// An agent that dies at once: the error carries its output, and
	// neither a container nor a directory is left.
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tfmt.Fprintln(os.Stderr, \"boom: the agent failed on purpose\")\n\tos.Exit(3)\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(src, "go.mod"), []byte("module boom\n\ngo 1.21\n"), 0o644)
	bad := filepath.Join(src, "boom")
	build := exec.Command("go", "build", "-o", bad, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a failing agent: %v: %s", err, out)
	}
	before := entries()
	name := fmt.Sprintf("failing-%d", time.Now().UnixNano())
	fc := cfg
	fc.Name = name
	fc.Options = docker.Options{AgentPath: bad}
	_, err := sandboxes.Create(ctx, fc)
	if err == nil || !strings.Contains(err.Error(), "boom: the agent failed on purpose") || !errors.Is(err, sandboxes.ErrUnavailable) {
		t.Errorf("create with a dying agent: %v", err)
	}
	res, lerr := c.ContainerList(ctx, mobyclient.ContainerListOptions{All: true,
		Filters: mobyclient.Filters{}.Add("label", "code-sandboxes.name="+name)})
	if lerr != nil || len(res.Items) != 0 {
		t.Errorf("containers left after a failed create: %d %v", len(res.Items), lerr)
	}
	if after := entries(); len(after) > len(before) {
		t.Errorf("directories left after a failed create: before %v, after %v", before, after)
	}

	// Refused before anything is made, each with its reason.
	for _, tc := range []struct {
		what string
		mod  func(*sandboxes.Config)
		want error
		says string
	}{
		{"dynamic agent", func(c *sandboxes.Config) { c.Options = docker.Options{AgentPath: "/usr/bin/python3"} }, sandboxes.ErrInvalidConfig, "CGO_ENABLED=0"},
		{"not an executable", func(c *sandboxes.Config) { c.Options = docker.Options{AgentPath: "/etc/passwd"} }, sandboxes.ErrInvalidConfig, "AgentPath"},
		{"no engine", func(c *sandboxes.Config) { c.Options = docker.Options{Host: "unix:///nonexistent/docker.sock"} }, sandboxes.ErrUnavailable, "start dockerd"},
		{"unknown environment", func(c *sandboxes.Config) { c.Environment = "no-such-env" }, sandboxes.ErrInvalidConfig, "no-such-env"},
		{"packages without network", func(c *sandboxes.Config) { c.Packages = []string{"six"} }, sandboxes.ErrInvalidConfig, "network"},
		{"host environment", func(c *sandboxes.Config) {
			c.EnvironmentDir = hostEnvStore(t)
			c.Environment = "hostenv"
		}, sandboxes.ErrInvalidConfig, "host environment"},
	} {
		fc := cfg
		tc.mod(&fc)
		_, err := sandboxes.Create(ctx, fc)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %v saying %q", tc.what, err, tc.want, tc.says)
		}
	}
	if after := entries(); len(after) > len(before) {
		t.Errorf("directories left after refused creates: before %v, after %v", before, after)
	}
}

// hostEnvStore is a store with one host build, which the docker variant
// must refuse.
func hostEnvStore(t *testing.T) string {
	dir := t.TempDir()
	id := strings.Repeat("ab", 32)
	for _, d := range []string{"builds/" + id, "names", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ := json.Marshal(map[string]any{"id": id, "name": "hostenv", "base": "host", "host": true, "created_at": time.Now()})
	_ = os.WriteFile(filepath.Join(dir, "builds", id, "build.json"), rec, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "names", "hostenv"), []byte(id), 0o644)
	return dir
}

func TestDockerEnvironments(t *testing.T) {
	cfg := dockerConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	envs, err := sandboxes.ListEnvironments(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(envs, func(e sandboxes.Environment) bool { return e.Name == "python" })
	if i < 0 || envs[i].Variant != "docker" || len(envs[i].BuildID) != 64 {
		t.Errorf("environments = %+v", envs)
	}
}

// TestDockerPackages installs a wheel from a loopback index, which the
// container (network all: the internet, never the host) reaches where the
// test publishes it, in the test's own internet; a failed install leaves
// nothing behind.
func TestDockerPackages(t *testing.T) {
	cfg := dockerConfig(t)
	c := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := testInternet(t)
	wheel := testpypi.Wheel(t, "cs_demo", "1.0", "cs_demo", "VALUE = 42\n")
	index := testpypi.Serve(t, "cs-demo", testpypi.FileName("cs_demo", "1.0"), wheel)
	u, _ := url.Parse(index)
	fwd, err := n.Forward(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fwd
	cfg.NetworkPolicy = sandboxes.NetworkAll
	cfg.Packages, cfg.PackageIndex = []string{"cs-demo==1.0"}, u.String()
	// pip trusts plain http only on localhost.
	cfg.Env = map[string]string{"PIP_TRUSTED_HOST": testnet.ServerIPv4}
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ex, err := sb.RunCode(ctx, "import cs_demo\ncs_demo.VALUE")
	if err != nil || ex.Text() != "42" {
		t.Fatalf("installed package: %q %v %v", ex.Text(), ex.Error, err)
	}

	cfg.Packages = []string{"cs-missing-package"}
	cfg.Name = fmt.Sprintf("pkgfail-%d", time.Now().UnixNano())
	_, err = sandboxes.Create(ctx, cfg)
	if !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "cs-missing-package") {
		t.Fatalf("missing package = %v", err)
	}
	// The container ran when pip failed: Create must have removed it.
	res, err := c.ContainerList(ctx, mobyclient.ContainerListOptions{All: true,
		Filters: mobyclient.Filters{}.Add("label", "code-sandboxes.name="+cfg.Name)})
	if err != nil || len(res.Items) != 0 {
		t.Errorf("containers left after a failed install: %d %v", len(res.Items), err)
	}
}

// TestDockerCloseLeavesNoConnections: closing a docker sandbox closes
// every connection its handle kept to the agent, the lean execution
// connection's included (a long-running caller such as serve would
// otherwise keep one descriptor per sandbox it ever ran code in).
func TestDockerCloseLeavesNoConnections(t *testing.T) {
	cfg := dockerConfig(t)
	openFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	round := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		if ex := runOut(t, sb, "x = 40"); ex.Error != nil {
			t.Fatal(ex.Error)
		}
		if ex := runOut(t, sb, "x + 2"); ex.Text() != "42" {
			t.Fatalf("x + 2 = %q (%v)", ex.Text(), ex.Error)
		}
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	round() // whatever the process opens once (epoll, the cgroup files Go reads)
	before := openFDs()
	for range 3 {
		round()
	}
	if after := openFDs(); after > before {
		t.Errorf("%d descriptors open after 3 sandboxes were closed, %d before them", after, before)
	}
}
