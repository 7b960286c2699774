//go:build !localonly

package main

import (
	"strings"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/jupytertest"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// TestExecJupyter: `exec -v jupyter` runs on a real Jupyter Server named
// by the environment; the CLI's default lifetimes, which that variant
// can't own and refuses, are not applied to it.
func TestExecJupyter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Jupyter Server")
	}
	py := jupytertest.Python()
	testdep.Require(t, py != "", "no python3 with jupyter_server and ipykernel (apt-get install python3-jupyter-server)")
	s, cleanup, err := jupytertest.Launch(py)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	t.Setenv("JUPYTER_SERVER_URL", s.URL)
	t.Setenv("JUPYTER_TOKEN", s.Token)
	out, errOut, code := cli(t, "", "exec", "-v", "jupyter", "import os; print(6 * 7)")
	if code != 0 || strings.TrimSpace(out) != "42" {
		t.Fatalf("exec -v jupyter: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	// An explicit lifetime is still refused, with the reason.
	_, errOut, code = cli(t, "", "exec", "-v", "jupyter", "--lifetime", "1h", "1")
	if code == 0 || !strings.Contains(errOut, "not supported") {
		t.Errorf("--lifetime on jupyter: code %d, stderr %q", code, errOut)
	}
}
