package e2b

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/internal/testpypi"
)

// TestReconcileToLock runs the script a template build runs, in a real
// Python environment of its own: what the lock pins and what it needs stay,
// so do the protected roots and what they need; everything else the
// environment had is uninstalled; the system's packages are not touched.
func TestReconcileToLock(t *testing.T) {
	py, err := exec.LookPath("python3")
	testdep.Require(t, err == nil, "python3")
	dir := t.TempDir()
	venv := filepath.Join(dir, "venv")
	// --system-site-packages: pip comes from the system, and installs
	// into the venv; the system's own packages are visible, not ours.
	if out, err := exec.Command(py, "-m", "venv", "--without-pip", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	vpy := filepath.Join(venv, "bin", "python")
	if out, err := exec.Command(vpy, "-m", "pip", "--version").CombinedOutput(); err != nil {
		testdep.Require(t, false, "pip for python3 (Debian's python3-pip): "+string(out))
	}
	wheels := []struct {
		dist     string
		requires []string
	}{
		{"cs-locked", []string{"cs-needed", `cs-py2-only; python_version < "3"`, `cs-optional; extra == "more"`}},
		{"cs-needed", nil},
		{"cs-py2-only", nil},
		{"cs-optional", nil},
		{"cs-stray", []string{"cs-stray-dep"}},
		{"cs-stray-dep", nil},
		{"cs-guarded", []string{"cs-guarded-dep"}},
		{"cs-guarded-dep", nil},
	}
	args := []string{"-m", "pip", "install", "--no-index", "--no-deps", "--no-input", "--disable-pip-version-check", "--quiet"}
	var lockWheel []byte
	for _, w := range wheels {
		mod := strings.ReplaceAll(w.dist, "-", "_")
		b := testpypi.Wheel(t, w.dist, "1.0", mod, "", w.requires...)
		p := filepath.Join(dir, testpypi.FileName(w.dist, "1.0"))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if w.dist == "cs-locked" {
			lockWheel = b
		}
		args = append(args, p)
	}
	cmd := exec.Command(vpy, args...)
	cmd.Env = append(os.Environ(), "PIP_BREAK_SYSTEM_PACKAGES=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	lock := filepath.Join(dir, "requirements.lock")
	// A lock as pip-compile writes it: continuation lines, a comment.
	if err := os.WriteFile(lock, []byte("# pinned\ncs_Locked==1.0 \\\n    --hash=sha256:"+testpypi.SHA256(lockWheel)+"\n    # via -r in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "reconcile.py")
	if err := os.WriteFile(script, reconcileScript, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(vpy, script, lock, "--protect", "cs-guarded").CombinedOutput()
	if err != nil {
		t.Fatalf("reconcile: %v\n%s", err, out)
	}
	var removed []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "removed" {
			removed = append(removed, f[1])
		} else if l != "" {
			t.Errorf("unexpected output line %q", l)
		}
	}
	sort.Strings(removed)
	if got, want := strings.Join(removed, " "), "cs-optional cs-py2-only cs-stray cs-stray-dep"; got != want {
		t.Errorf("removed %q, want %q", got, want)
	}
	list, err := exec.Command(vpy, "-c", `import sysconfig, os
from importlib import metadata
site = os.path.realpath(sysconfig.get_paths()["purelib"])
print(" ".join(sorted(d.metadata["Name"] for d in metadata.distributions() if os.path.realpath(str(d.locate_file(""))) == site)))`).CombinedOutput()
	if err != nil {
		t.Fatalf("list: %v\n%s", err, list)
	}
	if got, want := strings.TrimSpace(string(list)), "cs-guarded cs-guarded-dep cs-locked cs-needed"; got != want {
		t.Errorf("the environment holds %q after reconciling, want %q", got, want)
	}
}
