package environment_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/testpypi"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// pythonStore is the default store with the built-in "python" environment
// built (minutes on first use, cached afterwards on the machine).
func pythonStore(t *testing.T) (*environment.Store, *environment.Build) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the python environment")
	}
	_, err := exec.LookPath("mmdebstrap")
	sandboxestest.Require(t, os.Geteuid() == 0 && err == nil, "building the python environment needs root and mmdebstrap (make deps)")
	st, err := environment.Open("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	b, err := st.Ensure(ctx, "python", environment.BuildOptions{Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	return st, b
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestPipLock installs a hash-pinned lock from a package index on loopback
// into an environment based on "python"; then the same lock against an
// index that serves other bytes must fail the build and say why.
func TestPipLock(t *testing.T) {
	st, py := pythonStore(t)
	locked := testpypi.Wheel(t, "cs_locked", "1.0", "cs_locked", "VALUE = 42\n")
	file := testpypi.FileName("cs_locked", "1.0")
	dir := t.TempDir()
	lock := "cs-locked==1.0 \\\n    --hash=sha256:" + testpypi.SHA256(locked) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "requirements.lock"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	name := "piptest-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))[:8]
	spec := func(index string) *environment.Spec {
		s, err := environment.ParseSpec([]byte("name: "+name+"\nbase: {environment: python}\npip: {lock: requirements.lock, index: '"+index+"'}\n"), dir)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	good := testpypi.Serve(t, "cs-locked", file, locked)
	st.LoopbackPorts = []int{testpypi.Port(t, good)}
	b, err := st.Build(ctx, spec(good), environment.BuildOptions{Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = st.Remove(b.ID) })
	if !strings.Contains(b.Base, py.ShortID()) {
		t.Errorf("base %q should name the python build %s", b.Base, py.ShortID())
	}
	hits, _ := filepath.Glob(filepath.Join(b.Rootfs(), "usr/local/lib/python3*/dist-packages/cs_locked/__init__.py"))
	if len(hits) != 1 {
		t.Fatalf("cs_locked not installed into the rootfs: %v", hits)
	}

	// Same lock, but the index now serves a different wheel under the same
	// name (a compromised or changed index): pip must refuse it.
	tampered := testpypi.Wheel(t, "cs_locked", "1.0", "cs_locked", "VALUE = 'tampered'\n")
	bad := testpypi.Serve(t, "cs-locked", file, tampered)
	st.LoopbackPorts = []int{testpypi.Port(t, bad)}
	_, err = st.Build(ctx, spec(bad), environment.BuildOptions{Force: true})
	if !errors.Is(err, environment.ErrBuildFailed) || !strings.Contains(err.Error(), "does not match its --hash") {
		t.Fatalf("tampered wheel: got %v", err)
	}
	// The good build survives a failed forced rebuild.
	if got, err := st.Resolve(name); err != nil || got.ID != b.ID {
		t.Errorf("after a failed rebuild the name must still point at the good build: %v", err)
	}
}
