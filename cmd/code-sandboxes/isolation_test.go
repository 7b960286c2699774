package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

func requireGVisor(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	_, err := exec.LookPath("runsc")
	testdep.Require(t, err == nil, "gVisor's runsc (apt-get install runsc; make deps)")
	testdep.Require(t, os.Geteuid() == 0, "root (isolation gvisor on the local variant runs runsc as root)")
}

// --isolation gvisor runs the code on gVisor's kernel (release 4.4.0), a
// bad level is refused.
func TestExecIsolation(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	if _, errs, code := cli(t, "", "exec", "--isolation", "vm", "1"); code != 1 || !strings.Contains(errs, "Isolation") {
		t.Errorf("--isolation vm: %d %q", code, errs)
	}
	requireGVisor(t)
	out, errs, code := cli(t, "", "exec", "--isolation", "gvisor", "import os; print(os.uname().release)")
	if code != 0 || strings.TrimSpace(out) != "4.4.0" {
		t.Fatalf("exec --isolation gvisor: %d %q %q", code, out, errs)
	}
}

// As a user other than root, isolation gvisor is refused with the reason
// (runsc creates the sandbox's namespaces and cgroup as root), not run
// under namespaces instead.
func TestIsolationGVisorNeedsRoot(t *testing.T) {
	requireGVisor(t)
	setpriv, err := exec.LookPath("setpriv")
	testdep.Require(t, err == nil, "setpriv (util-linux)")
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	nb := filepath.Join(dir, "code-sandboxes")
	if err := os.WriteFile(nb, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", nb, "exec", "--isolation", "gvisor", "1")
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin", "HOME=/", "CODE_SANDBOXES_RUNTIME_DIR=" + filepath.Join(dir, "rt")}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not supported") || !strings.Contains(string(out), "needs root") {
		t.Fatalf("exec --isolation gvisor as nobody: %v %q, want a refusal saying it needs root", err, out)
	}
}
