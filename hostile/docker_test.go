package hostile_test

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	mobyclient "github.com/moby/moby/client"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	_ "github.com/code-sandboxes/code-sandboxes/docker" // registers the docker variant
	"github.com/code-sandboxes/code-sandboxes/hostile"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// resourceCases are the cases about exhausting the host, already proven on
// the local variant (TestHostileLocal). On docker they exercise the engine's
// cgroups and tmpfs options rather than ours; they are slow, so they run only
// with -hostile.full. Every escape, secret, escalation, network and
// agent-integrity case always runs.
var resourceCases = []string{"NeverEnds", "FloodStdout", "FloodDisplay", "FileDescriptors", "DiskFill", "Memory", "Pids", "CPU"}

// dockerEngine returns a client of the local Docker engine; without one the
// test skips (fails with CI=true).
func dockerEngine(t *testing.T) *mobyclient.Client {
	t.Helper()
	c, err := mobyclient.New(mobyclient.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err = c.Ping(ctx, mobyclient.PingOptions{NegotiateAPIVersion: true}); err != nil {
			c.Close()
		}
	}
	sandboxestest.Require(t, err == nil, fmt.Sprintf("a Docker engine (make test starts dockerd through scripts/with-dockerd.sh): %v", err))
	t.Cleanup(func() { c.Close() })
	return c
}

// requireStaticBinary: the docker variant bind-mounts this test binary into
// each container as its init, which needs a static build.
func requireStaticBinary(t *testing.T) {
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

// dockerSandboxes keeps what the test learns about each docker sandbox on
// the host: its container and host-side directory (found through the
// container's /run/code-sandboxes mount, whatever the runtime dir).
type dockerSandboxes struct {
	c    *mobyclient.Client
	cfg  sandboxes.Config
	mu   sync.Mutex
	dirs map[string]string // sandbox id -> host directory
}

// containers lists the engine's containers (any state) carrying label.
func (d *dockerSandboxes) containers(t *testing.T, label string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := d.c.ContainerList(ctx, mobyclient.ContainerListOptions{All: true, Filters: mobyclient.Filters{}.Add("label", label)})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

func (d *dockerSandboxes) dir(t *testing.T, id string) string {
	t.Helper()
	d.mu.Lock()
	dir, ok := d.dirs[id]
	d.mu.Unlock()
	if ok {
		return dir
	}
	cs := d.containers(t, "code-sandboxes.id="+id)
	if len(cs) != 1 {
		t.Fatalf("sandbox %s: %d containers labelled with its id, want 1", id, len(cs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	insp, err := d.c.ContainerInspect(ctx, cs[0], mobyclient.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspecting sandbox %s: %v", id, err)
	}
	for _, m := range insp.Container.Mounts {
		if m.Destination == "/run/code-sandboxes" {
			dir = filepath.Dir(m.Source)
		}
	}
	if dir == "" || filepath.Base(dir) != id {
		t.Fatalf("sandbox %s: no host directory found through its /run/code-sandboxes mount (%q)", id, dir)
	}
	d.mu.Lock()
	d.dirs[id] = dir
	d.mu.Unlock()
	return dir
}

// created notes the sandbox and checks its host-side record is private:
// the directory 0700, the record (it holds the token) 0600.
func (d *dockerSandboxes) created(t *testing.T, sb *sandboxes.Sandbox) {
	t.Helper()
	dir := d.dir(t, sb.ID())
	for p, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "record.json"): 0o600} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("sandbox %s: %v", sb.ID(), err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("sandbox %s: %s has mode %v, want %v", sb.ID(), p, st.Mode().Perm(), want)
		}
	}
	d.token(t, sb.ID())
}

// token is the sandbox's access token, from its host-side record.
func (d *dockerSandboxes) token(t *testing.T, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dir(t, id), "record.json"))
	if err != nil {
		t.Fatalf("record of %s: %v", id, err)
	}
	var r struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.ID != id || len(r.Token) < 32 {
		t.Fatalf("record of %s: id %q, token of %d characters, %v", id, r.ID, len(r.Token), err)
	}
	return r.Token
}

// containerErr says whether the engine still has sandbox id's container
// (in any state).
func (d *dockerSandboxes) containerErr(t *testing.T, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range d.containers(t, "code-sandboxes.id="+id) {
		// One listed but already gone from the engine is being removed:
		// only one the engine can still inspect counts.
		insp, err := d.c.ContainerInspect(ctx, c, mobyclient.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			continue
		}
		state := "?"
		if err == nil && insp.Container.State != nil {
			state = string(insp.Container.State.Status)
		}
		return fmt.Errorf("container %.12s still exists (%s)", c, state)
	}
	return nil
}

// dirErr says whether sandbox id's host-side directory is still there.
func (d *dockerSandboxes) dirErr(id string) error {
	d.mu.Lock()
	dir, ok := d.dirs[id]
	d.mu.Unlock()
	if !ok {
		return nil
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("directory %s still exists (%v)", dir, err)
	}
	return nil
}

// waitFor polls check until it returns nil, for at most within.
func waitFor(within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitGone confirms (bounded; the machine may be loaded) that nothing of an
// ended sandbox is left: no container, no directory with its record.
//
// Where docker legitimately differs from local: there is no host-side
// process per sandbox (local's supervisor removes its directory the moment
// the sandbox ends). A container that ends on its own (lifetime, dead
// agent) is removed by the engine (AutoRemove); its directory (the record,
// 0600 in a 0700 directory, with a token nothing answers any more) goes at
// the handle's Close, or at the next sweep, which every List and Create on
// the machine runs. So: the container must go by itself, and the directory
// by the time one List has run.
func (d *dockerSandboxes) waitGone(t *testing.T, id string) {
	t.Helper()
	if err := waitFor(30*time.Second, func() error { return d.containerErr(t, id) }); err != nil {
		t.Fatalf("sandbox %s lingers 30s after it ended: %v", id, err)
	}
	if d.dirErr(id) == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := sandboxes.Sweep(ctx, d.cfg); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if err := waitFor(10*time.Second, func() error { return d.dirErr(id) }); err != nil {
		t.Fatalf("sandbox %s: its container is gone but after a Sweep %v", id, err)
	}
	t.Logf("sandbox %s: container removed by the engine; its directory by the next sweep (List)", id)
}

// TestHostileOnDocker runs the hostile-code suite on the docker variant: a
// container per sandbox from the python environment's image, our agent as
// its PID 1 and, in the sandbox's own user namespace, uid 1000 (a host uid of
// the sandbox's own). The host side keeps the access token in
// <runtime dir>/<id>/record.json, which must be out of every sandbox's reach.
func TestHostileOnDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("creates containers")
	}
	requireStaticBinary(t)
	c := dockerEngine(t)
	run := "h" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := sandboxes.Config{Variant: "docker", EnvironmentDir: envStoreDir, Tags: map[string]string{"hostile-run": run}}
	b := pythonEnv(t)
	warmUp(t, cfg)

	d := &dockerSandboxes{c: c, cfg: cfg, dirs: map[string]string{}}
	// Registered first, so it runs last: after every sandbox of the suite
	// was closed, killed or expired, none of them lingers.
	t.Cleanup(func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var left []string
			if cs := d.containers(t, "code-sandboxes.tag.hostile-run="+run); len(cs) > 0 {
				left = append(left, fmt.Sprintf("%d containers", len(cs)))
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
		SameHost: true,
		Limits:   true,
		Networks: networks(),
		Created:  d.created,
		Secrets: func(t *testing.T, sb *sandboxes.Sandbox) []string {
			return []string{d.token(t, sb.ID())}
		},
		Gone: d.waitGone,
		// The network supervisor: the egress stack, a host process of ours
		// per networked sandbox, its pid in the sandbox's directory.
		NetworkHelper: func(t *testing.T, sb *sandboxes.Sandbox) int {
			b, err := os.ReadFile(filepath.Join(d.dir(t, sb.ID()), "network.pid"))
			if err != nil {
				t.Fatalf("the network supervisor of %s: %v", sb.ID(), err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return pid
		},
		Skip: map[string]string{"ReadHostFiles": imageSkipReadHostFiles},
	}
	if !*full {
		for _, c := range resourceCases {
			o.Skip[c] = "resource exhaustion, proven on local (TestHostileLocal); run with -hostile.full for the docker engine's limits"
		}
	}
	start := time.Now()
	hostile.Run(t, cfg, o)
	sb := create(t, cfg)
	o.Created(t, sb)
	t.Run("WriteOutsideOnImage", func(t *testing.T) { writeOutsideOnImage(t, sb) })
	t.Run("ReadHostFilesOnImage", func(t *testing.T) {
		readHostFilesOnImage(t, sb, b.Rootfs(), func(path, entry, kind string) bool {
			switch {
			case path == "/run" && entry == "code-sandboxes":
				// The agent's socket directory, our bind mount.
				return true
			case path == "/sys/fs/cgroup/memory" && kind != "dir":
				// The container's own memory cgroup (its files, read-only;
				// the host's hierarchy would have child cgroups). The local
				// variant gives no /sys at all.
				return true
			}
			return false
		})
	})
	t.Run("HostCgroupsHidden", func(t *testing.T) {
		// Its own cgroup namespace (as a local sandbox): /proc/self/cgroup
		// names no host cgroup and no engine container id.
		ex := runPy(t, sb, "print(open('/proc/self/cgroup').read().strip())")
		lines := strings.Split(strings.TrimSpace(ex.Stdout()), "\n")
		for _, l := range lines {
			if !strings.HasSuffix(l, ":/") {
				t.Errorf("/proc/self/cgroup shows the host's hierarchy: %q", ex.Stdout())
				break
			}
		}
		t.Logf("RESULT %s: /proc/self/cgroup: %d hierarchies, each at / (own cgroup namespace)", t.Name(), len(lines))
	})
	t.Logf("suite ran in %s", time.Since(start).Round(time.Millisecond))
	logResults(t)
}
