package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

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

// serve --isolation gvisor creates every sandbox under gVisor.
func TestServeIsolation(t *testing.T) {
	requireGVisor(t)
	rt := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	url, key, done := startServe(t, ctx, rt, "--isolation", "gvisor")
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("serve did not stop")
		}
	}()
	id := createE2B(t, url, key)
	out, errs, code := cli(t, "", "exec", "--runtime-dir", rt, "--sandbox", id, "import os; print(os.uname().release)")
	if code != 0 || strings.TrimSpace(out) != "4.4.0" {
		t.Fatalf("a sandbox of serve --isolation gvisor: %d %q %q", code, out, errs)
	}
}
