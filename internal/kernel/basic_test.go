package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBasic(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, "x = 40\nprint('hi')\nx + 2")
	if m := r.main(); m == nil || str(t, m.Data["text/plain"]) != "42" {
		t.Fatalf("main result: %+v", r.events)
	}
	if r.stdout() != "hi\n" {
		t.Fatalf("stdout %q", r.stdout())
	}
	if r.events[0].Type != EventNumberOfExecutions || r.events[0].ExecutionCount != 1 {
		t.Fatalf("first event %+v", r.events[0])
	}
	r = exec1(t, s, "x")
	if r.events[0].ExecutionCount != 2 || str(t, r.main().Data["text/plain"]) != "40" {
		t.Fatalf("state/count: %+v", r.events)
	}
}

func TestLastExpressionRules(t *testing.T) {
	s := newTestSession(t)
	for _, tc := range []struct {
		code string
		want string // "" = no result
	}{
		{"None", ""},
		{"1 + 1;", ""},
		{"1 + 1; # comment", ""},
		{"1 + 1 # c;", "2"},
		{"a = 1; a", "1"},
		{"'s'", "'s'"},
		{"x = 5", ""},
		{"if True:\n    7", ""},
		{"[1,\n 2]", "[1, 2]"},
	} {
		r := exec1(t, s, tc.code)
		m := r.main()
		got := ""
		if m != nil {
			got = str(t, m.Data["text/plain"])
		}
		if got != tc.want || len(r.errors()) > 0 {
			t.Errorf("%q: main result %q, want %q (%+v)", tc.code, got, tc.want, r.events)
		}
	}
}

func TestDisplayProtocol(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, `
class R:
    def _repr_html_(self): return "<b>h</b>"
    def _repr_markdown_(self): return "**m**"
    def _repr_svg_(self): return "<svg/>"
    def _repr_png_(self): return b"\x89PNG"
    def _repr_jpeg_(self): return b"\xff\xd8"
    def _repr_latex_(self): return "$x$"
    def _repr_json_(self): return {"a": [1, 2]}
    def _repr_javascript_(self): return "alert(1)"
    def _repr_pdf_(self): return b"%PDF"
    def __repr__(self): return "R()"
class B:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": "<i>b</i>", "application/x-custom": {"k": 1}}, {"text/html": {"isolated": True}}
display(B(), 1)
R()
`)
	res := r.results()
	if len(res) != 3 {
		t.Fatalf("want 3 results, got %+v", r.events)
	}
	if res[0].IsMainResult || str(t, res[0].Data["text/html"]) != "<i>b</i>" || strings.ReplaceAll(string(res[0].Data["application/x-custom"]), " ", "") != `{"k":1}` {
		t.Fatalf("mimebundle: %+v", res[0])
	}
	if str(t, res[0].Data["text/plain"]) == "" || res[0].Metadata["text/html"] == nil {
		t.Fatalf("mimebundle plain/metadata: %+v", res[0])
	}
	if str(t, res[1].Data["text/plain"]) != "1" || res[1].IsMainResult {
		t.Fatalf("display(1): %+v", res[1])
	}
	m := res[2]
	want := map[string]string{
		"text/plain": "R()", "text/html": "<b>h</b>", "text/markdown": "**m**", "image/svg+xml": "<svg/>",
		"image/png": "iVBORw==", "image/jpeg": "/9g=", "text/latex": "$x$",
		"application/javascript": "alert(1)", "application/pdf": "JVBERg==",
	}
	if !m.IsMainResult {
		t.Fatal("last is not main")
	}
	for k, v := range want {
		if got := str(t, m.Data[k]); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if string(m.Data["application/json"]) != `{"a": [1, 2]}` {
		t.Errorf("json = %s", m.Data["application/json"])
	}
}

func TestIPythonDisplayAndPandas(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, `
from IPython.display import display, HTML, Markdown
display(HTML("<p>x</p>"), Markdown("# t"))
import pandas as pd
pd.DataFrame({"a": [1, 2]})
`)
	res := r.results()
	if len(res) != 3 || len(r.errors()) > 0 {
		t.Fatalf("results: %+v", r.events)
	}
	if str(t, res[0].Data["text/html"]) != "<p>x</p>" || str(t, res[1].Data["text/markdown"]) != "# t" {
		t.Fatalf("IPython objects: %+v", res)
	}
	if !res[2].IsMainResult || !strings.Contains(str(t, res[2].Data["text/html"]), "<table") {
		t.Fatalf("DataFrame: %+v", res[2])
	}
}

func TestMatplotlib(t *testing.T) {
	s := newTestSession(t, func(o *Options) { o.Env = []string{"PATH=/usr/bin:/bin"} })
	r := exec1(t, s, `
import os, matplotlib.pyplot as plt
print(os.environ["MPLBACKEND"])
plt.plot([1, 2, 3])
plt.show()
fig = plt.figure()
plt.plot([3, 2])
`)
	if len(r.errors()) > 0 {
		t.Fatalf("errors: %+v", r.errors())
	}
	if r.stdout() != "Agg\n" {
		t.Fatalf("stdout %q", r.stdout())
	}
	var figs []Event
	for _, e := range r.results() {
		if _, ok := e.Data["image/png"]; ok {
			figs = append(figs, e)
		}
	}
	if len(figs) != 2 {
		t.Fatalf("want 2 figures, got %+v", r.results())
	}
	for _, f := range figs {
		if f.IsMainResult || str(t, f.Data["text/plain"]) != "<Figure size 640x480 with 1 Axes>" || !strings.HasPrefix(str(t, f.Data["image/png"]), "iVBOR") {
			t.Fatalf("figure result %+v", f.Data["text/plain"])
		}
	}
	// The main result (a list of Line2D) precedes the end-of-cell figure.
	if m := r.main(); m == nil || !strings.Contains(str(t, m.Data["text/plain"]), "Line2D") {
		t.Fatalf("main: %+v", r.main())
	}
	r = exec1(t, s, "plt.get_fignums()")
	if str(t, r.main().Data["text/plain"]) != "[]" {
		t.Fatalf("figures left open: %+v", r.main())
	}
}

func TestTopLevelAwait(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, "import asyncio\nawait asyncio.sleep(0.01)\nasync def f(): return 7\nawait f()")
	if m := r.main(); m == nil || str(t, m.Data["text/plain"]) != "7" {
		t.Fatalf("%+v", r.events)
	}
}

func TestOrdering(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, `
import os, sys, subprocess
print("p1")
os.system("echo s1")
print("e1", file=sys.stderr)
display("d1")
subprocess.run(["echo", "s2"])
print("p2", end="")
sys.stdout.flush()
os.system("echo e2 >&2")
display("d2")
print("p3")
`)
	// Merge adjacent chunks of one stream, then split into lines.
	var seq []string
	var cur, curType string
	flush := func() {
		for _, l := range strings.Split(strings.TrimRight(cur, "\n"), "\n") {
			if l != "" {
				seq = append(seq, curType[3:]+":"+l)
			}
		}
		cur = ""
	}
	for _, e := range r.events {
		switch e.Type {
		case EventStdout, EventStderr:
			if e.Type != curType {
				flush()
				curType = e.Type
			}
			cur += e.Text
		case EventResult:
			flush()
			seq = append(seq, "r:"+str(t, e.Data["text/plain"]))
		}
	}
	flush()
	got := strings.Join(seq, " ")
	want := "out:p1 out:s1 err:e1 r:'d1' out:s2 out:p2 err:e2 r:'d2' out:p3"
	if got != want {
		t.Fatalf("order:\n got %s\nwant %s", got, want)
	}
}

func TestErrors(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, "def f():\n    return 1/0\nf()")
	errs := r.errors()
	if len(errs) != 1 || errs[0].Name != "ZeroDivisionError" || errs[0].Value != "division by zero" || !r.out.Error {
		t.Fatalf("%+v", r.events)
	}
	tb := errs[0].Traceback
	if !strings.Contains(tb, `File "<cell-1>", line 3`) || !strings.Contains(tb, "return 1/0") || strings.Contains(tb, "kernel") || strings.Contains(tb, "_exec_cell") {
		t.Fatalf("traceback:\n%s", tb)
	}
	r = exec1(t, s, "x = (")
	errs = r.errors()
	if len(errs) != 1 || errs[0].Name != "SyntaxError" || !strings.Contains(errs[0].Traceback, "x = (") || !strings.Contains(errs[0].Traceback, "<cell-2>") {
		t.Fatalf("syntax: %+v", errs)
	}
	// Nor the machinery around a cell: the kernel's own frames (magics) and
	// the asyncio loop that runs a top-level await, in chained exceptions too.
	for _, code := range []string{
		"async def g():\n    raise KeyError(1)\nawait g()",
		"%time 1/0",
		"import asyncio\nasync def h():\n    raise ValueError('x')\ntry:\n    await h()\nexcept ValueError as e:\n    raise RuntimeError('y') from e",
	} {
		errs := exec1(t, s, code).errors()
		if len(errs) != 1 {
			t.Fatalf("%q: %+v", code, errs)
		}
		if tb := errs[0].Traceback; strings.Contains(tb, "csbx_kernel") || strings.Contains(tb, "base_events.py") || !strings.Contains(tb, "<cell-") {
			t.Errorf("%q: traceback shows the kernel's machinery:\n%s", code, tb)
		}
	}
}

// Tracebacks show the source of every cell they pass through: one run
// before anything loaded linecache, one run after, and after user code
// emptied linecache's cache.
func TestTracebackSourcesOfEarlierCells(t *testing.T) {
	s := newTestSession(t)
	exec1(t, s, "def early():\n    return 1/0")
	for range 20 {
		exec1(t, s, "x = 1")
	}
	check := func(call, line string) {
		t.Helper()
		errs := exec1(t, s, call).errors()
		if len(errs) != 1 || !strings.Contains(errs[0].Traceback, line) {
			t.Fatalf("%s: the traceback lacks %q:\n%+v", call, line, errs)
		}
	}
	check("early()", "return 1/0") // loads linecache
	exec1(t, s, "def late():\n    return {}['k']")
	for range 20 {
		exec1(t, s, "x = 2")
	}
	check("late()", "return {}['k']")
	// inspect reads a cell's source from linecache too, with no error
	// to make the kernel register it.
	exec1(t, s, "def later():\n    return 'source of later'")
	if out := exec1(t, s, "import inspect; print(inspect.getsource(later))").stdout(); !strings.Contains(out, "return 'source of later'") {
		t.Fatalf("inspect.getsource of a cell's function: %q", out)
	}
	exec1(t, s, "import linecache; linecache.clearcache()")
	check("early()", "return 1/0")
	check("late()", "return {}['k']")
}

func TestSysExit(t *testing.T) {
	s := newTestSession(t)
	for _, tc := range []struct {
		code   string
		want   int
		stderr string
	}{
		{"import sys\nkeep = 1\nsys.exit(3)", 3, ""},
		{"sys.exit()", 0, ""},
		{"sys.exit('bye')", 1, "bye\n"},
		{"exit(4)", 4, ""},
	} {
		r := exec1(t, s, tc.code)
		if r.out.ExitCode == nil || *r.out.ExitCode != tc.want || len(r.errors()) > 0 || r.stderr() != tc.stderr {
			t.Fatalf("%q: %+v %+v", tc.code, r.out, r.events)
		}
	}
	if r := exec1(t, s, "keep"); r.out.ExitCode != nil || str(t, r.main().Data["text/plain"]) != "1" {
		t.Fatalf("state lost after sys.exit: %+v", r.events)
	}
}

func TestInterrupt(t *testing.T) {
	s := newTestSession(t)
	exec1(t, s, "keep = 5")
	if s.Interrupt() {
		t.Fatal("Interrupt with nothing running returned true")
	}
	// A SIGINT between executions must not kill the kernel.
	syscall.Kill(s.Pid(), syscall.SIGINT)
	time.Sleep(50 * time.Millisecond)
	var r run
	r.out, r.err = s.Execute(context.Background(), Request{Code: "import time\nprint('go', flush=True)\nwhile True: time.sleep(0.01)"}, func(e Event) {
		r.events = append(r.events, e)
		if e.Type == EventStdout {
			s.Interrupt()
		}
	})
	errs := r.errors()
	if r.err != nil || !r.out.Interrupted || r.out.KernelDied || len(errs) != 1 || errs[0].Name != "KeyboardInterrupt" {
		t.Fatalf("%+v %v %+v", r.out, r.err, r.events)
	}
	if r := exec1(t, s, "keep"); str(t, r.main().Data["text/plain"]) != "5" {
		t.Fatalf("state lost: %+v", r.events)
	}
}

func TestTimeout(t *testing.T) {
	s := newTestSession(t, func(o *Options) { o.KillGrace = 300 * time.Millisecond })
	exec1(t, s, "keep = 5")
	r := execReq(t, s, Request{Code: "import time\nwhile True: time.sleep(0.01)", Timeout: 200 * time.Millisecond})
	errs := r.errors()
	if !r.out.TimedOut || r.out.KernelDied || len(errs) != 1 || errs[0].Name != "TimeoutError" || !strings.Contains(errs[0].Value, "200ms") {
		t.Fatalf("%+v %+v", r.out, r.events)
	}
	if r := exec1(t, s, "keep"); str(t, r.main().Data["text/plain"]) != "5" {
		t.Fatalf("state lost: %+v", r.events)
	}
	// A cell that ignores SIGINT is killed after the grace period.
	start := time.Now()
	r = execReq(t, s, Request{Code: "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(0.01)", Timeout: 200 * time.Millisecond})
	errs = r.errors()
	if !r.out.TimedOut || !r.out.KernelDied || len(errs) != 1 || errs[0].Name != "TimeoutError" || time.Since(start) > 5*time.Second {
		t.Fatalf("%+v %+v", r.out, r.events)
	}
	r = exec1(t, s, "1")
	if !strings.Contains(r.stderr(), "state") || str(t, r.main().Data["text/plain"]) != "1" {
		t.Fatalf("after kill: %+v", r.events)
	}
}

func TestKernelDeath(t *testing.T) {
	s := newTestSession(t)
	for _, tc := range []struct{ code, want string }{
		{"print('bye')\nimport os\nos._exit(3)", "status 3"},
		{"import ctypes\nctypes.string_at(0)", "signal 11"},
		{"import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "signal 9"},
	} {
		exec1(t, s, "keep = 1")
		pid := s.Pid()
		r := exec1(t, s, tc.code)
		errs := r.errors()
		if !r.out.KernelDied || len(errs) != 1 || errs[0].Name != "KernelDied" || !strings.Contains(errs[0].Value, tc.want) {
			t.Fatalf("%q: %+v %+v", tc.code, r.out, r.events)
		}
		if strings.Contains(tc.code, "bye") && r.stdout() != "bye\n" {
			t.Fatalf("output before death lost: %q", r.stdout())
		}
		if alive(pid) {
			t.Fatalf("kernel %d still alive", pid)
		}
		r = exec1(t, s, "keep")
		if !strings.Contains(r.stderr(), "were lost") || len(r.errors()) != 1 || r.errors()[0].Name != "NameError" {
			t.Fatalf("after death: %+v", r.events)
		}
		if r = exec1(t, s, "1"); r.stderr() != "" {
			t.Fatalf("lost-state note repeated: %q", r.stderr())
		}
	}
	// Killed from outside between executions.
	exec1(t, s, "1")
	syscall.Kill(s.Pid(), syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	if r := exec1(t, s, "2"); !strings.Contains(r.stderr(), "signal 9") {
		t.Fatalf("%+v", r.events)
	}
}

func TestEnvVars(t *testing.T) {
	s := newTestSession(t, func(o *Options) { o.Env = []string{"PATH=/usr/bin:/bin", "KEEP=k"} })
	r := execReq(t, s, Request{Code: "import os\nprint(os.environ['FOO'], os.environ['KEEP'])\nos.system('echo $FOO')", EnvVars: map[string]string{"FOO": "bar", "KEEP": "tmp"}})
	if r.stdout() != "bar tmp\nbar\n" {
		t.Fatalf("%q", r.stdout())
	}
	r = exec1(t, s, "print(os.environ.get('FOO'), os.environ['KEEP'])")
	if r.stdout() != "None k\n" {
		t.Fatalf("not restored: %q", r.stdout())
	}
}

func TestVariables(t *testing.T) {
	s := newTestSession(t)
	ctx := context.Background()
	if _, _, err := s.GetVariable(ctx, "x"); !errors.Is(err, ErrVariableNotFound) {
		t.Fatalf("before start: %v", err)
	}
	exec1(t, s, "x = {'a': [1, 2.5, None]}\nclass C: pass\nc = C()\nn = float('nan')")
	v, isRepr, err := s.GetVariable(ctx, "x")
	if err != nil || isRepr || string(v) != `{"a": [1, 2.5, null]}` {
		t.Fatalf("x: %s %v %v", v, isRepr, err)
	}
	v, isRepr, err = s.GetVariable(ctx, "c")
	if err != nil || !isRepr || !strings.Contains(string(v), "C object at") {
		t.Fatalf("c: %s %v %v", v, isRepr, err)
	}
	if v, isRepr, _ = s.GetVariable(ctx, "n"); !isRepr || string(v) != `"nan"` {
		t.Fatalf("nan: %s", v)
	}
	if _, _, err = s.GetVariable(ctx, "nope"); !errors.Is(err, ErrVariableNotFound) {
		t.Fatal(err)
	}
	for _, bad := range []string{"1x", "a-b", "", "class", "a b"} {
		if _, _, err = s.GetVariable(ctx, bad); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	if err := s.SetVariable(ctx, "y", json.RawMessage(`{"k": [1, "two"]}`)); err != nil {
		t.Fatal(err)
	}
	if r := exec1(t, s, "y['k'][1]"); str(t, r.main().Data["text/plain"]) != "'two'" {
		t.Fatalf("%+v", r.events)
	}
	if err := s.SetVariable(ctx, "y", json.RawMessage(`{bad`)); !errors.Is(err, ErrUnsendable) {
		t.Fatal(err)
	}
	if err := s.SetVariable(ctx, "for", json.RawMessage(`1`)); !errors.Is(err, ErrInvalidName) {
		t.Fatal(err)
	}
	if err := s.SetVariable(ctx, "deep", json.RawMessage(strings.Repeat("[", 100000)+strings.Repeat("]", 100000))); !errors.Is(err, ErrUnsendable) {
		t.Fatalf("deep: %v", err)
	}
	// Waits for a running execution.
	go s.Execute(ctx, Request{Code: "import time; time.sleep(0.3); z = 9"}, nil)
	time.Sleep(50 * time.Millisecond)
	if v, _, err := s.GetVariable(ctx, "z"); err != nil || string(v) != "9" {
		t.Fatalf("z: %s %v", v, err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	go s.Execute(ctx, Request{Code: "time.sleep(0.5)"}, nil)
	time.Sleep(20 * time.Millisecond)
	if _, _, err := s.GetVariable(short, "z"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx: %v", err)
	}
}

func TestPythonNotFound(t *testing.T) {
	s := NewSession(Options{Python: "/nonexistent/python3"})
	_, err := s.Execute(context.Background(), Request{Code: "1"}, nil)
	if !errors.Is(err, ErrPythonNotFound) || !strings.Contains(err.Error(), "/nonexistent/python3") {
		t.Fatal(err)
	}
	s = NewSession(Options{Env: []string{"PATH=/nonexistent"}, Python: "python3"})
	if _, err = s.Execute(context.Background(), Request{Code: "1"}, nil); !errors.Is(err, ErrPythonNotFound) {
		t.Fatal(err)
	}
}

func TestCloseKillsGroup(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, "import subprocess\np = subprocess.Popen(['sleep', '100'])\np.pid")
	child := 0
	if err := json.Unmarshal([]byte(str(t, r.main().Data["text/plain"])), &child); err != nil || child == 0 {
		t.Fatalf("%+v", r.events)
	}
	pid := s.Pid()
	s.Close()
	for _, p := range []int{pid, child} {
		if alive(p) {
			t.Fatalf("process %d survived Close", p)
		}
	}
	if _, err := s.Execute(context.Background(), Request{Code: "1"}, nil); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

// alive reports whether pid exists and is not a zombie waiting for init.
func alive(pid int) bool {
	for range 50 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && b[i+2] == 'Z' {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func TestCloseDuringExecute(t *testing.T) {
	s := newTestSession(t)
	done := make(chan error)
	go func() {
		_, err := s.Execute(context.Background(), Request{Code: "import time; time.sleep(100)"}, nil)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Execute did not return after Close")
	}
}

// TestRepeatedCellCompiledOnce: a cell run again reuses its compiled code
// (py/cells.py's _CODE_CACHE) and must behave as a fresh compile: its own
// file name in frames and tracebacks (nested functions too), state read at
// run time, and a cell that failed to compile fails again.
func TestRepeatedCellCompiledOnce(t *testing.T) {
	s := newTestSession(t)
	exec1(t, s, "n = 0")
	const cell = "import sys\nn += 1\ndef f():\n    return sys._getframe().f_code.co_filename\n(n, sys._getframe().f_code.co_filename, f())"
	for i := 2; i <= 4; i++ {
		r := exec1(t, s, cell)
		want := fmt.Sprintf("(%d, '<cell-%d>', '<cell-%d>')", i-1, i, i)
		if m := r.main(); m == nil || str(t, m.Data["text/plain"]) != want {
			t.Fatalf("run %d: %+v, want %s", i, r.events, want)
		}
	}
	const boom = "def g():\n    return 1 / 0\ng()"
	var tbs []string
	for range 2 {
		r := exec1(t, s, boom)
		if errs := r.errors(); len(errs) != 1 || errs[0].Name != "ZeroDivisionError" {
			t.Fatalf("%+v", r.events)
		} else {
			tbs = append(tbs, errs[0].Traceback)
		}
	}
	if tbs[0] == tbs[1] || !strings.Contains(tbs[1], "return 1 / 0") {
		t.Fatalf("the second run's traceback is not its own:\n%s\n---\n%s", tbs[0], tbs[1])
	}
	for range 2 {
		r := exec1(t, s, "return 5")
		if errs := r.errors(); len(errs) != 1 || errs[0].Name != "SyntaxError" {
			t.Fatalf("return outside a function: %+v", r.events)
		}
	}
}
