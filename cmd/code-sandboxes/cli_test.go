package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/mcptest"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

var bin, runtime string

func TestMain(m *testing.M) {
	mcptest.MaybeServe() // this binary as the MCP server of TestMCPToolServer
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		// Fuzzing (scripts/fuzz.sh): its targets call functions only,
		// and every fuzz process runs TestMain; the builds below are for
		// the tests that run the CLI.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "cs-cli-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "code-sandboxes")
	runtime = filepath.Join(dir, "runtime")
	// As make build does: the lean sandbox binary beside the CLI.
	for out, pkg := range map[string]string{bin: ".", filepath.Join(dir, "code-sandboxes-sandbox"): "../code-sandboxes-sandbox"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	// Nothing may be left behind: every test deletes what it created.
	if ents, _ := os.ReadDir(runtime); len(ents) != 0 {
		fmt.Fprintf(os.Stderr, "sandboxes left behind: %d\n", len(ents))
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func cli(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "CODE_SANDBOXES_RUNTIME_DIR="+runtime)
	cmd.Dir = t.TempDir()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestExec(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	out, errs, code := cli(t, "", "exec", "import sys; print(sys.version_info[0])")
	if code != 0 || strings.TrimSpace(out) != "3" {
		t.Fatalf("exec: %d %q %q", code, out, errs)
	}
	out, errs, code = cli(t, "", "exec", "1/0")
	if code != 1 || !strings.Contains(errs, "ZeroDivisionError") {
		t.Fatalf("failing code: %d %q %q", code, out, errs)
	}
	out, _, code = cli(t, "x = 20\nx * 2\n", "exec")
	if code != 0 || strings.TrimSpace(out) != "40" {
		t.Fatalf("stdin: %d %q", code, out)
	}
	out, _, code = cli(t, "", "exec", "import sys; sys.exit(2)")
	if code != 1 {
		t.Fatalf("sys.exit(2): %d %q", code, out)
	}
	out, _, code = cli(t, "", "exec", "--json", "40 + 2")
	var ex struct {
		Results []struct {
			Data map[string]any `json:"data"`
		} `json:"results"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &ex) != nil || len(ex.Results) != 1 || ex.Results[0].Data["text/plain"] != "42" {
		t.Fatalf("--json: %d %q", code, out)
	}
	if _, errs, code := cli(t, "", "exec", "--memory", "lots", "1"); code != 1 || !strings.Contains(errs, "size") {
		t.Errorf("bad --memory: %d %q", code, errs)
	}
	if _, errs, code := cli(t, "", "exec", "--pids", "12abc", "1"); code != 1 || !strings.Contains(errs, "--pids") {
		t.Errorf("bad --pids: %d %q", code, errs)
	}
	if out, errs, code := cli(t, "", "exec", "--memory", "unlimited", "--pids", "unlimited", "6 * 7"); code != 0 || strings.TrimSpace(out) != "42" {
		t.Errorf("--memory unlimited --pids unlimited: %d %q %q", code, out, errs)
	}
	if _, errs, code := cli(t, "", "exec", "--network", "allowlist", "1"); code != 1 || !strings.Contains(errs, "AllowedHosts") {
		t.Errorf("allowlist without hosts: %d %q", code, errs)
	}
}

func TestExecFigure(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	testdep.Require(t, exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() == nil, "matplotlib (make deps)")
	dir := t.TempDir()
	out, errs, code := cli(t, "", "exec", "--figures-dir", dir, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
	if code != 0 || !strings.Contains(out, "figure saved:") {
		t.Fatalf("figure: %d %q %q", code, out, errs)
	}
	p := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "figure saved:"))
	b, err := os.ReadFile(p)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("saved figure %s: %v", p, err)
	}
}

func TestLifecycleCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	out, errs, code := cli(t, "", "create", "--name", "cli-test", "--tag", "team=ai", "--lifetime", "5m")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	out, _, code = cli(t, "", "list")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "team=ai") || !strings.Contains(out, "cli-test") {
		t.Fatalf("list: %d %q", code, out)
	}
	out, _, code = cli(t, "", "list", "--json", "--tag", "team=ai")
	var infos []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil || len(infos) != 1 || infos[0]["id"] != id {
		t.Fatalf("list --json: %d %q", code, out)
	}
	if out, _, code = cli(t, "", "get", "cli-test"); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("get by name: %d %q", code, out)
	}
	if _, errs, code := cli(t, "", "get", "nope"); code != 1 || !strings.Contains(errs, "not found") {
		t.Errorf("get missing: %d %q", code, errs)
	}
	if out, _, code := cli(t, "n\n", "delete", id); code != 1 || !strings.Contains(out, "Nothing deleted") {
		t.Errorf("delete answered no: %d %q", code, out)
	}
	if _, errs, code := cli(t, "", "delete"); code != 1 || !strings.Contains(errs, "name a sandbox") {
		t.Errorf("delete without target: %d %q", code, errs)
	}
	if out, errs, code := cli(t, "", "delete", "--tag", "team=ai", "-y"); code != 0 || !strings.Contains(out, "deleted "+id) {
		t.Fatalf("delete by tag: %d %q %q", code, out, errs)
	}
	if out, _, _ := cli(t, "", "list", "--json"); strings.Contains(out, id) {
		t.Errorf("deleted sandbox still listed: %q", out)
	}
	if out, errs, code := cli(t, "", "sweep"); code != 0 || !strings.Contains(out, "removed 0 dead sandboxes") {
		t.Errorf("sweep: %d %q %q", code, out, errs)
	}
}

func TestREPL(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	out, errs, code := cli(t, "x = 5\ndef f(y):\n    return y * x\n\nf(3)\n:exit\n", "repl")
	if code != 0 || !strings.Contains(out, "15") {
		t.Fatalf("repl: %d %q %q", code, out, errs)
	}
}

func TestVersionAndEnvironments(t *testing.T) {
	if out, _, code := cli(t, "", "version"); code != 0 || !strings.HasPrefix(out, "code-sandboxes ") {
		t.Errorf("version: %d %q", code, out)
	}
	if out, _, code := cli(t, "", "environments"); code != 0 || !strings.Contains(out, "local") {
		t.Errorf("environments: %d %q", code, out)
	}
	if _, errs, code := cli(t, "", "exec", "--variant", "nope", "1"); code != 1 || !strings.Contains(errs, "unknown sandbox variant") {
		t.Errorf("unknown variant: %d %q", code, errs)
	}
}

// TestUnprivileged runs the CLI as an ordinary user (nobody), as most users
// will: user namespaces without root, no cgroup delegation on this host.
func TestUnprivileged(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	if os.Geteuid() != 0 {
		out, errs, code := cli(t, "", "exec", "--memory", "unlimited", "--pids", "unlimited", "6 * 7")
		if code != 0 || strings.TrimSpace(out) != "42" {
			t.Fatalf("exec as uid %d: %d %q %q", os.Geteuid(), code, out, errs)
		}
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	testdep.Require(t, err == nil, "setpriv (util-linux)")
	dir, err := os.MkdirTemp("", "cs-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	nb := filepath.Join(dir, "code-sandboxes")
	if err := os.WriteFile(nb, b, 0o755); err != nil {
		t.Fatal(err)
	}
	rt := filepath.Join(dir, "rt")
	_ = os.Chmod(dir, 0o755)
	if err := os.Mkdir(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(rt, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	asNobody := func(args ...string) (string, error) {
		cmd := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", nb, "exec"}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "CODE_SANDBOXES_RUNTIME_DIR=" + rt}
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// nobody has no writable cgroup: the default limits can't be enforced,
	// so the sandbox is refused with the way out, never started without.
	if out, err := asNobody("6 * 7"); err == nil || !strings.Contains(out, "--memory unlimited --pids unlimited") {
		t.Fatalf("exec as nobody with the default limits: %v %q", err, out)
	}
	out, err := asNobody("--memory", "unlimited", "--pids", "unlimited", "import os; print(os.getuid(), os.getgid(), os.path.exists('/root'))\n6 * 7")
	if err != nil || out != "1000 100 False\n42\n" {
		t.Fatalf("exec as nobody: %v %q", err, out)
	}
	// HOME=/ isn't nobody's to write: the execute-only copy of the binary
	// is kept in the runtime directory instead (.exec), and stays there
	// for the next sandboxes; nothing else may.
	ents, _ := os.ReadDir(rt)
	for _, e := range ents {
		if e.Name() != ".exec" {
			t.Errorf("left behind in the runtime dir: %s", e.Name())
		}
	}
}

// A misspelt setting is not silently ignored: the CLI names it, and says
// where the settings are listed; a known one draws no warning.
func TestUnknownSettingWarned(t *testing.T) {
	misspelt := "CODE_SANDBOXES_" + "RUNSCC" // (split: internal/settings' test lists every whole name in the code)
	t.Setenv(misspelt, "/usr/bin/runsc")
	t.Setenv("CODE_SANDBOXES_SPIN_WAIT", "0")
	out, stderr, code := cli(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "code-sandboxes ") {
		t.Fatalf("version: %d %q %q", code, out, stderr)
	}
	if !strings.Contains(stderr, "warning: "+misspelt+" is not a setting of this version") || !strings.Contains(stderr, "Settings") {
		t.Errorf("no warning for a misspelt setting: %q", stderr)
	}
	if strings.Contains(stderr, "CODE_SANDBOXES_SPIN_WAIT") || strings.Contains(stderr, "CODE_SANDBOXES_RUNTIME_DIR") {
		t.Errorf("a known setting warned about: %q", stderr)
	}
}
