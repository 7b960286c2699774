package kernel

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mainText is the main result's text/plain, "" if there is none.
func mainText(t *testing.T, r run) string {
	t.Helper()
	if m := r.main(); m != nil {
		return str(t, m.Data["text/plain"])
	}
	return ""
}

func noErrors(t *testing.T, code string, r run) {
	t.Helper()
	if errs := r.errors(); len(errs) > 0 {
		t.Fatalf("%q: unexpected error %s: %s\n%s", code, errs[0].Name, errs[0].Value, errs[0].Traceback)
	}
}

// Cells pasted from notebooks: IPython's input transforms, run by our stdlib
// kernel (no IPython import).
func TestIPythonTransforms(t *testing.T) {
	s := newTestSession(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name, code        string
		wantMain, wantOut string
	}{
		{"dedent", "    x = 1\n    if x:\n        y = 2\n    y", "2", ""},
		{"dedent after blank lines", "\n\n\tz = 3\n\tz", "3", ""},
		{"bang", "!echo hi from sh", "", "hi from sh\n"},
		{"bang expands $name and {expr}", "who = 'world'\n!echo hello $who {1+2} $$", "", "hello world 3 $\n"},
		{"bang keeps shell vars it cannot expand", "!X=q; echo ${X:-d} $X", "", "q q\n"},
		{"bang bang", "!!printf 'a\\nb\\n'", "['a', 'b']", ""},
		{"assign from shell", "lines = !printf 'one\\ntwo\\n'; echo err >&2\n(lines, lines.s, lines.n)", "(['one', 'two', 'err'], 'one two err', 'one\\ntwo\\nerr')", ""},
		{"exit code", "!exit 3\n_exit_code", "3", ""},
		{"bang inside a block", "for i in range(2):\n    !echo n{i}", "", "n0\nn1\n"},
		{"not inside strings or brackets", "s = '''\n!not a command\n%neither\n'''\nv = (7\n%4)\n(s, v)", "('\\n!not a command\\n%neither\\n', 3)", ""},
		{"modulo untouched", "a = 7 % 4; a", "3", ""},
		{"cd", "%cd " + dir + "\nimport os\nos.getcwd()", "'" + dir + "'", dir + "\n"},
		{"cd reaches children", "!pwd", "", dir + "\n"},
		{"pwd", "%pwd", "'" + dir + "'", ""},
		{"env set", "%env CS_MAGIC_TEST=v1", "", "env: CS_MAGIC_TEST=v1\n"},
		{"env get", "%env CS_MAGIC_TEST", "'v1'", ""},
		{"env assign", "e = %env\ne['CS_MAGIC_TEST']", "'v1'", ""},
		{"env reaches children", "!echo $CS_MAGIC_TEST", "", "v1\n"},
		{"bash cell", "%%bash\nX=5\necho bash $((X*2))\n", "", "bash 10\n"},
		{"sh cell", "%%sh\necho sh here\n", "", "sh here\n"},
		{"writefile", "%%writefile " + filepath.Join(dir, "w.txt") + "\nline1\n", "", "Writing " + filepath.Join(dir, "w.txt") + "\n"},
		{"writefile append", "%%writefile -a w.txt\nline2\n", "", "Appending to w.txt\n"},
		{"matplotlib inline is accepted", "%matplotlib inline", "", ""},
		{"get_ipython as notebook exports write it", "get_ipython().system('echo exported')\nget_ipython().run_line_magic('env', 'CS_MAGIC_TEST')", "'v1'", "exported\n"},
		{"line magic expands variables", "d = " + `"` + dir + `"` + "\n%cd {d}", "", dir + "\n"},
	} {
		r := exec1(t, s, tc.code)
		noErrors(t, tc.code, r)
		if got := mainText(t, r); got != tc.wantMain {
			t.Errorf("%s: main result %q, want %q", tc.name, got, tc.wantMain)
		}
		if tc.wantOut != "" && r.stdout() != tc.wantOut {
			t.Errorf("%s: stdout %q, want %q", tc.name, r.stdout(), tc.wantOut)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "w.txt"))
	if err != nil || string(b) != "line1\nline2\n" {
		t.Fatalf("%%%%writefile wrote %q, %v", b, err)
	}
}

func TestIPythonTime(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, "%time sum(range(10))")
	noErrors(t, "%time", r)
	if mainText(t, r) != "45" || !strings.Contains(r.stdout(), "CPU times: user ") || !strings.Contains(r.stdout(), "Wall time: ") {
		t.Fatalf("%%time: main %q, stdout %q", mainText(t, r), r.stdout())
	}
	r = exec1(t, s, "%%time\nq = 6\nq * 7\n")
	noErrors(t, "%%time", r)
	if mainText(t, r) != "42" || !strings.Contains(r.stdout(), "Wall time: ") {
		t.Fatalf("%%%%time: main %q, stdout %q", mainText(t, r), r.stdout())
	}
	r = exec1(t, s, "%timeit 1 + 1")
	noErrors(t, "%timeit", r)
	if !strings.Contains(r.stdout(), "per loop") {
		t.Fatalf("%%timeit stdout %q", r.stdout())
	}
}

func TestIPythonHistory(t *testing.T) {
	s := newTestSession(t)
	exec1(t, s, "10")
	exec1(t, s, "20")
	r := exec1(t, s, "(_, __, Out[1], _1, In[2], len(In))")
	noErrors(t, "history", r)
	if got := mainText(t, r); got != "(20, 10, 10, 10, '20', 4)" {
		t.Fatalf("history names: %q", got)
	}
	r = exec1(t, s, "display(5)\ndisplay({'a': 1})")
	noErrors(t, "display", r)
	if res := r.results(); len(res) != 2 || res[0].IsMainResult || str(t, res[1].Data["text/plain"]) != "{'a': 1}" {
		t.Fatalf("display: %+v", res)
	}
}

func TestIPythonErrors(t *testing.T) {
	s := newTestSession(t)
	for code, name := range map[string]string{
		"%nosuchmagic x":         "UsageError",
		"%%nosuchcell\nbody":     "UsageError",
		"%cd /nonexistent/dir/x": "FileNotFoundError",
		"%env NO_SUCH_VAR_CS_T":  "UsageError",
		"%%writefile\nx":         "UsageError",
	} {
		r := exec1(t, s, code)
		if errs := r.errors(); len(errs) != 1 || errs[0].Name != name {
			t.Errorf("%q: errors %+v, want one %s", code, errs, name)
		}
	}
	// A failing command is not a Python error: its status is in _exit_code.
	r := exec1(t, s, "%%bash\necho out; echo err >&2; exit 4\n")
	noErrors(t, "failing bash", r)
	if r.stdout() != "out\n" || r.stderr() != "err\n" {
		t.Fatalf("bash cell streams: %q / %q", r.stdout(), r.stderr())
	}
	if got := mainText(t, exec1(t, s, "_exit_code")); got != "4" {
		t.Fatalf("_exit_code %q", got)
	}
	// Line numbers survive the transforms.
	r = exec1(t, s, "  !true\n  x = 1\n  1/0")
	if errs := r.errors(); len(errs) != 1 || !strings.Contains(errs[0].Traceback, "line 3") {
		t.Fatalf("traceback: %+v", errs)
	}
}

// %pip runs the sandbox's own pip (so the network policy applies to it).
func TestIPythonPip(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, "%pip --version")
	noErrors(t, "%pip", r)
	if !strings.HasPrefix(r.stdout(), "pip ") {
		t.Fatalf("%%pip --version: %q %q", r.stdout(), r.stderr())
	}
	r = exec1(t, s, "%pip install --no-index --quiet cs-no-such-package-xyz\n_exit_code")
	if mainText(t, r) == "0" || r.stderr() == "" {
		t.Fatalf("failed install: exit %q, stderr %q", mainText(t, r), r.stderr())
	}
}

// TestUserSiteAfterStart: a package pip puts in the user's site after the
// kernel started (`pip install` in a command: a fresh home has no
// ~/.local when the kernel starts, so site did not add it) imports in the
// kernel, as in a new process.
func TestUserSiteAfterStart(t *testing.T) {
	home := t.TempDir()
	s := newTestSession(t, func(o *Options) {
		o.Env = append(os.Environ(), "HOME="+home)
	})
	r := exec1(t, s, "import cs_usersite_probe")
	if errs := r.errors(); len(errs) != 1 || errs[0].Name != "ModuleNotFoundError" {
		t.Fatalf("before the install: %+v", r.events)
	}
	// What pip's user install leaves, written from outside the kernel.
	cmd := exec.Command(testPython, "-c", "import site; print(site.getusersitepackages())")
	cmd.Env = append(os.Environ(), "HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	usersite := strings.TrimSpace(string(out))
	if !strings.HasPrefix(usersite, home) {
		t.Fatalf("user site %q is not under HOME %q", usersite, home)
	}
	if err := os.MkdirAll(filepath.Join(usersite, "cs_usersite_probe"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(usersite, "cs_usersite_probe", "__init__.py"), []byte("VALUE = 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = exec1(t, s, "import cs_usersite_probe\ncs_usersite_probe.VALUE")
	noErrors(t, "import after the install", r)
	if got := mainText(t, r); got != "42" {
		t.Fatalf("import after the install: %q", got)
	}
	// Where site puts it: before the system's site-packages.
	r = exec1(t, s, "import sys\n[p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))][0]")
	if got := mainText(t, r); got != "'"+usersite+"'" {
		t.Errorf("first site directory on sys.path: %s, want %q", got, usersite)
	}
}

// Interrupting a %%bash cell stops the command and the cell.
func TestIPythonInterruptShell(t *testing.T) {
	s := newTestSession(t)
	r := execReq(t, s, Request{Code: "%%bash\necho started\nsleep 30\necho never\n", Timeout: 1500 * time.Millisecond})
	if strings.Contains(r.stdout(), "never") || len(r.errors()) == 0 || r.out.KernelDied {
		t.Fatalf("interrupted bash cell: %+v", r.events)
	}
	if got := mainText(t, exec1(t, s, "1 + 1")); got != "2" {
		t.Fatalf("kernel after interrupt: %q", got)
	}
}
