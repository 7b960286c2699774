package sandboxes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// envStoreDir is the environment store of the environment tests: "" is the
// default store (environment.DefaultDir); CODE_SANDBOXES_TEST_ENV_DIR
// overrides it (during development, a store with a hand-made "python"
// build).
var envStoreDir = os.Getenv("CODE_SANDBOXES_TEST_ENV_DIR")

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// pythonEnv returns the store's "python" build, or skips (fails with CI=true)
// when there is none.
func pythonEnv(t *testing.T) (*environment.Store, *environment.Build) {
	t.Helper()
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	dir := envStoreDir
	if dir == "" {
		dir = environment.DefaultDir()
	}
	st, err := environment.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Built on first use (minutes), then cached on the machine.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	b, err := st.Ensure(ctx, "python", environment.BuildOptions{Progress: logWriter{t}})
	sandboxestest.Require(t, err == nil, fmt.Sprintf("the python environment in the store %s (set CODE_SANDBOXES_TEST_ENV_DIR): %v", st.Dir, err))
	return st, b
}

func pythonEnvConfig(t *testing.T) sandboxes.Config {
	cfg := localConfig(t)
	cfg.Environment = "python"
	cfg.EnvironmentDir = envStoreDir
	cfg.BuildOutput = logWriter{t}
	return cfg
}

// TestLocalEnvConformance: the whole conformance suite on a sandbox whose
// root is the python environment's rootfs.
func TestLocalEnvConformance(t *testing.T) {
	pythonEnv(t)
	sandboxestest.Run(t, pythonEnvConfig(t), sandboxestest.Options{Rich: true})
}

// TestLocalEnvRunsTheRootfs: code runs on the environment's rootfs, not on
// the host's directories, the sandbox record names the build, and the
// rootfs is left as it was.
func TestLocalEnvRunsTheRootfs(t *testing.T) {
	_, b := pythonEnv(t)
	rootfs := b.Rootfs()
	listing := func(dir string) []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		return names
	}
	inRootfs, onHost := listing(filepath.Join(rootfs, "usr/bin")), listing("/usr/bin")
	if strings.Join(inRootfs, " ") == strings.Join(onHost, " ") {
		t.Fatal("the rootfs's /usr/bin is the host's: this test could not tell them apart")
	}
	watched := []string{"", "etc", "home", "tmp", "var/tmp", "usr/bin"}
	mtimes := func() string {
		var s strings.Builder
		for _, d := range watched {
			if fi, err := os.Lstat(filepath.Join(rootfs, d)); err == nil {
				fmt.Fprintf(&s, "%s %d %v\n", d, fi.ModTime().UnixNano(), fi.Mode())
			}
		}
		return s.String()
	}
	before := mtimes()

	sb := newLocal(t, func(c *sandboxes.Config) { *c = pythonEnvConfig(t) })
	ex := runOut(t, sb, `import os, sys, json
print(json.dumps({"usr_bin": sorted(os.listdir("/usr/bin")), "exe": os.path.realpath(sys.executable),
    "root": sorted(os.listdir("/")), "uid": os.getuid(), "home": os.listdir("/home")}))`)
	var got struct {
		UsrBin []string `json:"usr_bin"`
		Exe    string   `json:"exe"`
		Root   []string `json:"root"`
		UID    int      `json:"uid"`
		Home   []string `json:"home"`
	}
	if err := json.Unmarshal([]byte(ex.Stdout()), &got); err != nil {
		t.Fatalf("%v: %q %v", err, ex.Stdout(), ex.Error)
	}
	if strings.Join(got.UsrBin, " ") != strings.Join(inRootfs, " ") {
		t.Errorf("the sandbox's /usr/bin is not the rootfs's (%d entries; rootfs %d, host %d)", len(got.UsrBin), len(inRootfs), len(onHost))
	}
	if _, err := os.Stat(filepath.Join(rootfs, got.Exe)); err != nil || !strings.HasPrefix(got.Exe, "/usr/bin/python3") {
		t.Errorf("python %s is not the rootfs's: %v", got.Exe, err)
	}
	if got.UID != 1000 || strings.Join(got.Home, " ") != "user" {
		t.Errorf("uid %d, /home %v", got.UID, got.Home)
	}
	t.Logf("root of the sandbox: %v", got.Root)
	// Nothing of the host beyond what the rootfs has.
	for _, p := range []string{"/work", "/root/.cache", "/usr/local/go", rootfs} {
		ex := runOut(t, sb, "import os; print(os.path.exists("+pyStr(p)+"))")
		if strings.TrimSpace(ex.Stdout()) != "False" {
			t.Errorf("sandbox sees %s: %q", p, ex.Stdout())
		}
	}
	// The root directory itself is the sandbox's own tmpfs: /evil lands
	// there, never in the rootfs (whose mtimes are checked below).
	if ex := runOut(t, sb, "open('/evil', 'w').write('x')"); ex.Error != nil {
		t.Errorf("the root directory is not writable: %v", ex.Error)
	}
	if _, err := os.Lstat(filepath.Join(rootfs, "evil")); err == nil {
		t.Errorf("/evil reached the rootfs")
	}
	for _, p := range []string{"/usr/evil", "/etc/evil", "/var/evil"} {
		if ex := runOut(t, sb, "open("+pyStr(p)+", 'w')"); ex.Error == nil {
			t.Errorf("sandbox wrote %s", p)
		}
	}
	if ex := runOut(t, sb, "open('/var/tmp/x', 'w').write('x'); print(open('/tmp/x').read())"); strings.TrimSpace(ex.Stdout()) != "x" {
		t.Errorf("/var/tmp is not the sandbox's /tmp: %q %v", ex.Stdout(), ex.Error)
	}

	rec := readState(t, sb.ID())
	if rec.Environment != "python" || rec.BuildID != b.ID {
		t.Errorf("record: environment %q build %q, want python %s", rec.Environment, rec.BuildID, b.ID)
	}
	if after := mtimes(); after != before {
		t.Errorf("the rootfs changed:\n%s\n%s", before, after)
	}
}

type stateRecord struct {
	Environment string `json:"environment"`
	BuildID     string `json:"build_id"`
}

func readState(t *testing.T, id string) stateRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(local.SandboxDir(runtimeDir(t), id), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r stateRecord
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLocalEnvBuildEnv: a build's Env reaches the sandbox under the user's
// Env, on a rootfs build and on a host build. The store is made here, its
// rootfs a symlink to the python build's.
func TestLocalEnvBuildEnv(t *testing.T) {
	_, py := pythonEnv(t)
	dir := t.TempDir()
	mk := func(name string, host bool, n int) {
		b := environment.Build{ID: fmt.Sprintf("%064x", n), Name: name, Base: "test", CreatedAt: time.Now(), Host: host,
			Env: map[string]string{"CS_BUILD_ONLY": "build-" + name, "CS_BOTH": "build"}}
		bdir := filepath.Join(dir, "builds", b.ID)
		if err := os.MkdirAll(bdir, 0o755); err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(b)
		if err := os.WriteFile(filepath.Join(bdir, "build.json"), j, 0o644); err != nil {
			t.Fatal(err)
		}
		if !host {
			if err := os.Symlink(py.Rootfs(), filepath.Join(bdir, "rootfs")); err != nil {
				t.Fatal(err)
			}
		}
		os.MkdirAll(filepath.Join(dir, "names"), 0o755)
		if err := os.WriteFile(filepath.Join(dir, "names", name), []byte(b.ID+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("withenv", false, 1)
	mk("hostenv", true, 2)
	envs, err := sandboxes.ListEnvironments(context.Background(), sandboxes.Config{Variant: "local", EnvironmentDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range envs {
		names = append(names, e.Name+"@"+strings.TrimLeft(e.BuildID, "0"))
	}
	if got := strings.Join(names, " "); got != "host@ hostenv@2 withenv@1" {
		t.Errorf("environments: %v", names)
	}
	for _, name := range []string{"withenv", "hostenv"} {
		t.Run(name, func(t *testing.T) {
			sb := newLocal(t, func(c *sandboxes.Config) {
				c.Environment, c.EnvironmentDir = name, dir
				c.Env = map[string]string{"CS_BOTH": "user"}
			})
			ex := runOut(t, sb, "import os; print(os.environ.get('CS_BUILD_ONLY'), os.environ.get('CS_BOTH'))")
			if want := "build-" + name + " user\n"; ex.Stdout() != want {
				t.Errorf("env: %q, want %q", ex.Stdout(), want)
			}
			res, err := sb.Commands().Run(context.Background(), "echo $CS_BUILD_ONLY $CS_BOTH")
			if err != nil || res.Stdout != "build-"+name+" user\n" {
				t.Errorf("command env: %+v %v", res, err)
			}
		})
	}
}

// TestLocalEnvUnknown: an environment that does not exist is a clear
// ErrInvalidConfig naming what does.
func TestLocalEnvUnknown(t *testing.T) {
	cfg := localConfig(t)
	cfg.Environment, cfg.EnvironmentDir = "no-such-env", t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := sandboxes.Create(ctx, cfg)
	if !errors.Is(err, sandboxes.ErrInvalidConfig) || !errors.Is(err, environment.ErrNotFound) {
		t.Fatalf("Create = %v, want ErrInvalidConfig and environment.ErrNotFound", err)
	}
	if !strings.Contains(err.Error(), `"no-such-env"`) || !strings.Contains(err.Error(), "has: host") {
		t.Errorf("the error should name the environment and list what exists: %v", err)
	}
	t.Log(err)
	if ents, _ := os.ReadDir(runtimeDir(t)); len(ents) != 0 {
		t.Errorf("a failed Create left %d entries in the runtime dir", len(ents))
	}
}
