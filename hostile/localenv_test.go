package hostile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/hostile"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// envStoreDir is the environment store the docker and local-environment
// runs use: "" is the default store; CODE_SANDBOXES_TEST_ENV_DIR overrides it
// (as for the root package's environment tests).
var envStoreDir = os.Getenv("CODE_SANDBOXES_TEST_ENV_DIR")

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// pythonEnv makes sure the store's "python" environment is built (on first
// use: minutes, or a wait on another process's build), or skips (fails with
// CI=true) when it can't be.
func pythonEnv(t *testing.T) *environment.Build {
	t.Helper()
	dir := envStoreDir
	if dir == "" {
		dir = environment.DefaultDir()
	}
	st, err := environment.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	b, err := st.Ensure(ctx, "python", environment.BuildOptions{Progress: tlog{t}})
	sandboxestest.Require(t, err == nil, fmt.Sprintf("the python environment in the store %s (set CODE_SANDBOXES_TEST_ENV_DIR): %v", st.Dir, err))
	t.Logf("environment python: build %s ready after %s", b.ShortID(), time.Since(start).Round(time.Millisecond))
	return b
}

// warmUp creates and closes one sandbox with a generous deadline: the first
// use of a build on an engine imports it (minutes), which the suite's
// bounded Creates must not have to absorb.
func warmUp(t *testing.T, cfg sandboxes.Config) {
	t.Helper()
	start := time.Now()
	cfg.BuildOutput = tlog{t}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("warm-up Create: %v", err)
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("warm-up Close: %v", err)
	}
	t.Logf("warm-up (first sandbox created and closed) took %s", time.Since(start).Round(time.Millisecond))
}

// logResults logs the outcomes this test recorded (Results holds every
// test's of the binary).
func logResults(t *testing.T) {
	for _, r := range hostile.Results() {
		if strings.HasPrefix(r.Case, t.Name()+"/") {
			t.Logf("%-60s %s", r.Case, r.Outcome)
		}
	}
}

// imageSkipReadHostFiles is why the suite's ReadHostFiles is replaced by
// readHostFilesOnImage on a sandbox whose root is an environment's image.
const imageSkipReadHostFiles = "the root is the environment's image, which has its own /var/log, /var/lib and /run (apt and dpkg state, /run/lock), read-only; " +
	"the suite takes any non-empty one for the host's: ReadHostFilesOnImage checks the same paths against the image instead"

// hostPaths are the suite's ReadHostFiles paths (hostile.go), plus this
// binary's host-side ones.
func hostPaths(secretPath string) []string {
	paths := []string{"/root", "/var/log", "/run", "/srv", "/opt", "/mnt", "/var/lib", "/proc/1/root/root", "/sys/fs/cgroup/memory",
		"/etc/shadow", "/etc/gshadow", "/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_rsa_key", secretPath, filepath.Dir(secretPath)}
	if wd, err := os.Getwd(); err == nil {
		paths = append(paths, filepath.Join(wd, "hostile.go"), wd)
	}
	return paths
}

// readHostFilesOnImage is the suite's ReadHostFiles for a sandbox whose root
// is an environment's image (rootfs on the host): every host path is refused
// or absent, and a directory the sandbox can list lists exactly what the
// image has there (plus what own() accepts as the variant's own, such as a
// mount point), never the host's; a host secret is found nowhere.
func readHostFilesOnImage(t *testing.T, sb *sandboxes.Sandbox, rootfs string, own func(path string, entry, kind string) bool) {
	secret := "host-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	secretPath := filepath.Join(t.TempDir(), "host-secret.txt")
	if err := os.WriteFile(secretPath, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	paths := hostPaths(secretPath)
	pl, _ := json.Marshal(paths)
	ex := runPy(t, sb, `import json, os
out = {}
# A writable root directory is the sandbox's own tmpfs (the local variant):
# a directory on it (root's /root, created by the variant) is the sandbox's.
rootdev = os.stat('/').st_dev if os.access('/', os.W_OK) else None
for p in json.loads(`+pyQuote(string(pl))+`):
    try:
        if os.path.isdir(p) and os.stat(p).st_dev == rootdev:
            out[p] = {'own': True}
        elif os.path.isdir(p):
            out[p] = {'listed': {e: ('dir' if os.path.isdir(os.path.join(p, e)) and not os.path.islink(os.path.join(p, e)) else 'other') for e in os.listdir(p)}}
        else:
            open(p, 'rb').read(16); out[p] = {'read': True}
    except OSError as e:
        out[p] = {'blocked': type(e).__name__}
print(json.dumps(out))`)
	var got map[string]struct {
		Listed  map[string]string `json:"listed"`
		Own     bool              `json:"own"`
		Read    bool              `json:"read"`
		Blocked string            `json:"blocked"`
	}
	if err := json.Unmarshal([]byte(ex.Stdout()), &got); err != nil || len(got) != len(paths) {
		t.Fatalf("probe: %v %q %v", err, ex.Stdout(), ex.Error)
	}
	blocked, image, ownDirs := 0, 0, 0
	for _, p := range paths {
		g := got[p]
		switch {
		case g.Blocked != "":
			blocked++
		case g.Own:
			ownDirs++
			t.Logf("%s: the sandbox's own directory, on its root tmpfs", p)
		case g.Read:
			t.Errorf("host file readable: %s", p)
		default:
			// The image's own directory: same entries as in the rootfs.
			var want []string
			if ents, err := os.ReadDir(filepath.Join(rootfs, p)); err == nil {
				for _, e := range ents {
					want = append(want, e.Name())
				}
			}
			var extra []string
			mine := 0
			for e, kind := range g.Listed {
				switch {
				case slices.Contains(want, e):
				case own != nil && own(p, e, kind):
					mine++
				default:
					extra = append(extra, e)
				}
			}
			var missing []string
			for _, e := range want {
				if _, ok := g.Listed[e]; !ok {
					missing = append(missing, e)
				}
			}
			if len(extra) > 0 || len(missing) > 0 {
				t.Errorf("%s lists what the image does not have there (not the image's directory: the host's?): extra %v, missing %v", p, extra, missing)
				continue
			}
			image++
			t.Logf("%s: the image's own directory: %d entries as in the image, %d the variant's own", p, len(g.Listed)-mine, mine)
		}
	}
	ex = runPy(t, sb, "import subprocess\nr = subprocess.run(['grep','-rlsF','--devices=skip','-D','skip',"+pyQuote(secret)+",'/home','/tmp','/files','/etc','/var','/dev','/run','/mnt','/opt','/srv'], capture_output=True, text=True, timeout=60)\nprint(r.stdout)", sandboxes.WithTimeout(90*time.Second))
	if strings.TrimSpace(ex.Stdout()) != "" || ex.Error != nil {
		t.Errorf("the host's secret is readable inside: %q %v", ex.Stdout(), ex.Error)
	}
	t.Logf("RESULT %s: %d/%d host paths refused or absent, %d list only the image's entries (and the variant's own mounts), %d the sandbox's own (its root tmpfs); host secret not found by grep -r", t.Name(), blocked, len(paths), image, ownDirs)
}

// writeOutsideOnImage walks the sandbox's whole tree: nothing of the
// image (nor of the variant's own mounts) is writable for user code but the
// sandbox's own tmpfs mounts (the local variant's root directory is one). WriteOutside tries a list of paths; an image
// brings many more (a directory left 0777, /run/lock 1777…), and only a
// read-only mount makes them all safe.
func writeOutsideOnImage(t *testing.T, sb *sandboxes.Sandbox) {
	ex := runPy(t, sb, `import os, stat
own = ('/proc', '/sys', '/dev', '/tmp', '/home/user', '/files', '/var/tmp')
# A writable root directory is the sandbox's own tmpfs (the local variant):
# what lives on it (/home, the mount points) is the sandbox's, not the image's.
rootdev = os.stat('/').st_dev if os.access('/', os.W_OK) else None
writable, n = [], 0
for root, dirs, files in os.walk('/'):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in own]
    for name in dirs + files:
        p = os.path.join(root, name); n += 1
        try:
            st = os.lstat(p)
            if not stat.S_ISLNK(st.st_mode) and st.st_dev != rootdev and os.access(p, os.W_OK):
                writable.append(p)
        except OSError:
            pass
print(n, len(writable), writable[:20])`, sandboxes.WithTimeout(2*time.Minute))
	var n, w int
	if _, err := fmt.Sscan(ex.Stdout(), &n, &w); err != nil || n < 1000 || ex.Error != nil {
		t.Fatalf("walk: %q %v %v", ex.Stdout(), err, ex.Error)
	}
	if w != 0 {
		t.Errorf("writable outside the sandbox's own mounts: %s", ex.Stdout())
	}
	t.Logf("RESULT %s: %d entries outside the sandbox's own mounts, %d writable", t.Name(), n, w)
}

func create(t *testing.T, cfg sandboxes.Config) *sandboxes.Sandbox {
	t.Helper()
	if cfg.NetworkPolicy == "" {
		cfg.NetworkPolicy = sandboxes.NetworkNone
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

func runPy(t *testing.T, sb *sandboxes.Sandbox, code string, opts ...sandboxes.RunOption) *sandboxes.Execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex, err := sb.RunCode(ctx, code, opts...)
	if err != nil {
		t.Fatalf("RunCode: %v", err)
	}
	return ex
}

func pyQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestHostileOnLocalEnvironment runs the escape cases of the suite on the
// local variant with Environment "python": the sandbox's root is built from
// the environment's rootfs (internal/isolate's Spec.Rootfs) instead of the
// host's system directories. The other cases (output, resources, signals,
// lifetime) don't depend on what the root is made of and run on the host's
// directories in TestHostileLocal.
func TestHostileOnLocalEnvironment(t *testing.T) {
	requireLocal(t)
	b := pythonEnv(t)
	cfg := localCfg()
	cfg.Environment = "python"
	cfg.EnvironmentDir = envStoreDir
	warmUp(t, cfg)

	// Nothing of the test's sandboxes lingers when it ends: every
	// supervisor has exited, not only removed its directory (TestMain
	// checks the records once, without waiting). Registered first, so it
	// runs after the sandboxes' Close.
	var mu sync.Mutex
	var ids []string
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			waitGone(t, rt, id)
		}
	})
	o := localOptions()
	created := o.Created
	o.Created = func(t *testing.T, sb *sandboxes.Sandbox) {
		created(t, sb)
		mu.Lock()
		ids = append(ids, sb.ID())
		mu.Unlock()
	}
	o.Skip = map[string]string{"ReadHostFiles": imageSkipReadHostFiles}
	// Run: ReadNeighbour, Secrets, WriteOutside, NetworkNone, Escalation,
	// SetuidBinaries (the rootfs brings its own), WriteProcSys, and
	// ReadHostFilesOnImage and WriteOutsideOnImage below.
	for _, c := range []string{"FakeEndOfExecution", "NeverEnds", "FloodStdout", "FloodDisplay", "FileDescriptors", "DiskFill",
		"Memory", "Pids", "CPU", "KillAll", "SignalAgent", "SleepPastLifetime"} {
		o.Skip[c] = "not an escape case (the rootfs changes nothing there): run on the host's directories by TestHostileLocal"
	}
	start := time.Now()
	hostile.Run(t, cfg, o)
	sb := create(t, cfg)
	o.Created(t, sb)
	t.Run("ReadHostFilesOnImage", func(t *testing.T) {
		// The local variant mounts nothing of its own in these directories,
		// and gives the sandbox no /sys.
		readHostFilesOnImage(t, sb, b.Rootfs(), nil)
	})
	t.Run("WriteOutsideOnImage", func(t *testing.T) { writeOutsideOnImage(t, sb) })
	t.Logf("suite ran in %s", time.Since(start).Round(time.Millisecond))
	logResults(t)
}
