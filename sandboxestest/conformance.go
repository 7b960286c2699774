// Package sandboxestest is the conformance suite: behaviour tests written
// once and run against every variant, so that each variant proves the same
// contract. A variant's test calls Run with a Config that selects it.
package sandboxestest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/internal/testpypi"
)

// Options tune the suite to what a variant's sandbox image has.
type Options struct {
	// Rich: numpy and matplotlib are installed in the sandbox image.
	Rich bool
}

// Require fails (with CI=true) or skips a test whose dependency is missing.
func Require(t testing.TB, ok bool, why string) {
	t.Helper()
	testdep.Require(t, ok, why)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func run(t *testing.T, sb *sandboxes.Sandbox, code string, opts ...sandboxes.RunOption) *sandboxes.Execution {
	t.Helper()
	ex, err := sb.RunCode(ctxT(t, 2*time.Minute), code, opts...)
	if err != nil {
		t.Fatalf("RunCode(%q): %v", code, err)
	}
	return ex
}

// Run runs the conformance suite on the variant cfg selects. One sandbox is
// shared by most cases (creating one per case would measure start-up, not
// behaviour); cases that damage a sandbox create their own.
func Run(t *testing.T, cfg sandboxes.Config, o Options) {
	ctx := ctxT(t, 10*time.Minute)
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })

	t.Run("StatePersists", func(t *testing.T) {
		run(t, sb, "x = 40")
		ex := run(t, sb, "x + 2")
		if ex.Text() != "42" || !ex.Success() {
			t.Fatalf("x + 2 = %q (error %v)", ex.Text(), ex.Error)
		}
		if ex.ExecutionCount < 2 {
			t.Errorf("execution count = %d, want >= 2", ex.ExecutionCount)
		}
	})

	t.Run("SandboxContract", func(t *testing.T) {
		ex := run(t, sb, `import os, locale
print(os.getuid(), os.getgid(), os.environ["HOME"], os.getcwd(), os.environ.get("LANG"), os.environ.get("TZ"))`)
		want := "1000 100 /home/user /home/user C.UTF-8 UTC\n"
		if ex.Stdout() != want {
			t.Fatalf("contract: got %q, want %q", ex.Stdout(), want)
		}
		ex = run(t, sb, `import os, tempfile
p = tempfile.mktemp(dir="/tmp"); open(p, "w").write("x"); os.remove(p)
open("/home/user/probe", "w").write("y"); print(open("/home/user/probe").read())`)
		if strings.TrimSpace(ex.Stdout()) != "y" {
			t.Fatalf("writable /tmp and home: %q %v", ex.Stdout(), ex.Error)
		}
	})

	t.Run("StreamsLiveAndInOrder", func(t *testing.T) {
		var mu sync.Mutex
		var got []string
		var firstAt time.Time
		ex := run(t, sb, "import time, sys\nprint('a', flush=True)\ntime.sleep(0.6)\nprint('b', file=sys.stderr, flush=True)\nimport os\nos.system('echo c')\n'done'",
			sandboxes.OnStdout(func(m sandboxes.OutputMessage) {
				mu.Lock()
				if firstAt.IsZero() {
					firstAt = time.Now()
				}
				got = append(got, "out:"+m.Line)
				mu.Unlock()
			}),
			sandboxes.OnStderr(func(m sandboxes.OutputMessage) { mu.Lock(); got = append(got, "err:"+m.Line); mu.Unlock() }))
		joined := strings.Join(got, "|")
		if !strings.Contains(joined, "out:a") || !strings.Contains(joined, "err:b") || !strings.Contains(joined, "out:c") {
			t.Fatalf("callbacks saw %q", joined)
		}
		if strings.Index(joined, "out:a") > strings.Index(joined, "err:b") || strings.Index(joined, "err:b") > strings.Index(joined, "out:c") {
			t.Errorf("order: %q", joined)
		}
		if ex.CompletedAt.Sub(firstAt) < 400*time.Millisecond {
			t.Errorf("first stdout arrived %s before the end: not live", ex.CompletedAt.Sub(firstAt))
		}
		if ex.Text() != "done" {
			t.Errorf("main result %q", ex.Text())
		}
	})

	t.Run("ErrorsAreData", func(t *testing.T) {
		var cb *sandboxes.ExecutionError
		ex := run(t, sb, "def f():\n    return 1/0\nf()", sandboxes.OnError(func(e sandboxes.ExecutionError) { cb = &e }))
		if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || ex.Success() {
			t.Fatalf("error = %+v", ex.Error)
		}
		if !strings.Contains(ex.Error.Traceback, "return 1/0") {
			t.Errorf("traceback lacks the user's line: %q", ex.Error.Traceback)
		}
		// The kernel's own frames carry its file name: "kernel.py" when it
		// runs from its bytecode, its module's csbx_kernel_<hash>.py when
		// from source.
		if strings.Contains(ex.Error.Traceback, "kernel.py") || strings.Contains(ex.Error.Traceback, "csbx_kernel_") {
			t.Errorf("traceback shows the kernel's frames: %q", ex.Error.Traceback)
		}
		if cb == nil || cb.Name != "ZeroDivisionError" {
			t.Errorf("OnError not called: %+v", cb)
		}
		ex = run(t, sb, "def broken(:\n  pass")
		if ex.Error == nil || ex.Error.Name != "SyntaxError" {
			t.Errorf("syntax error = %+v", ex.Error)
		}
	})

	t.Run("ExitCode", func(t *testing.T) {
		ex := run(t, sb, "import sys; sys.exit(3)")
		if ex.ExitCode == nil || *ex.ExitCode != 3 || ex.Success() {
			t.Fatalf("exit code = %v, error %v", ex.ExitCode, ex.Error)
		}
		if ex := run(t, sb, "x"); ex.Text() != "40" {
			t.Errorf("state lost after sys.exit: %q", ex.Text())
		}
	})

	t.Run("RichDisplay", func(t *testing.T) {
		ex := run(t, sb, `class H:
    def _repr_html_(self): return "<b>hi</b>"
display(H())
H()`)
		if len(ex.Results) != 2 || ex.Results[0].HTML() != "<b>hi</b>" || ex.Results[0].IsMainResult || !ex.Results[1].IsMainResult {
			t.Fatalf("results = %+v", ex.Results)
		}
	})

	t.Run("NumpyAndMatplotlib", func(t *testing.T) {
		if !o.Rich {
			t.Skip("this variant's image has no numpy/matplotlib")
		}
		ex := run(t, sb, "import numpy as np\nfloat(np.arange(10).sum())")
		if ex.Text() != "45.0" {
			t.Fatalf("numpy: %q %v", ex.Text(), ex.Error)
		}
		ex = run(t, sb, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
		var png []byte
		for _, r := range ex.Results {
			if p := r.PNG(); p != nil {
				png = p
			}
		}
		if !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Fatalf("no PNG figure: %+v %v", ex.Results, ex.Error)
		}
	})

	t.Run("MIMEAccessors", func(t *testing.T) {
		ex := run(t, sb, `class R:
    def _repr_markdown_(self): return "# md"
    def _repr_svg_(self): return "<svg/>"
    def _repr_json_(self): return {"k": [1, 2]}
    def _repr_latex_(self): return "$x$"
    def _repr_javascript_(self): return "1;"
    def _repr_pdf_(self): return b"%PDF-1.4"
R()`)
		if len(ex.Results) != 1 {
			t.Fatalf("results = %+v (%v)", ex.Results, ex.Error)
		}
		r := ex.Results[0]
		j, _ := r.JSON().(map[string]any)
		if r.Markdown() != "# md" || r.SVG() != "<svg/>" || r.LaTeX() != "$x$" || r.JavaScript() != "1;" || string(r.PDF()) != "%PDF-1.4" || j == nil || len(j["k"].([]any)) != 2 {
			t.Fatalf("accessors: %+v", r.Data)
		}
		if r.Chart() != nil || r.DataFrame() != nil {
			t.Fatalf("chart/data on a plain object: %+v", r.Data)
		}
	})

	t.Run("IPythonCells", func(t *testing.T) {
		ex := run(t, sb, "    v = !echo one; echo two\n    %cd /tmp\n    %%sh_not_first_line = 1\n")
		if ex.Error == nil || ex.Error.Name != "SyntaxError" {
			// %%magic is only a cell magic on the first line (IPython's rule).
			t.Fatalf("%%%% in the middle of a cell: %v", ex.Error)
		}
		ex = run(t, sb, "    v = !echo one; echo two\n    %cd /tmp\n    import os\n    (v, os.getcwd())")
		if ex.Error != nil || ex.Text() != "(['one', 'two'], '/tmp')" {
			t.Fatalf("indented cell with !/%%: %q %v", ex.Text(), ex.Error)
		}
		ex = run(t, sb, "%%sh\necho from sh\n")
		if ex.Error != nil || ex.Stdout() != "from sh\n" {
			t.Fatalf("%%%%sh: %q %v", ex.Stdout(), ex.Error)
		}
	})

	t.Run("ChartsAndDataFrames", func(t *testing.T) {
		if !o.Rich {
			t.Skip("this variant's image has no numpy/matplotlib")
		}
		ex := run(t, sb, `import matplotlib.pyplot as plt
plt.bar(['a', 'b'], [3, 4], label='g')
plt.title('T'); plt.xlabel('X (m)')
plt.show()`)
		var c *sandboxes.Chart
		for _, r := range ex.Results {
			if r.PNG() != nil {
				c = r.Chart()
			}
		}
		if c == nil || c.Type != sandboxes.ChartBar || c.Title != "T" || c.XLabel != "X (m)" || c.XUnit != "m" || len(c.Elements) != 2 ||
			c.Elements[1].Label != "b" || c.Elements[1].Value == nil || *c.Elements[1].Value != 4 || c.Elements[1].Group != "g" {
			t.Fatalf("bar chart: %+v (%v)", c, ex.Error)
		}
		ex = run(t, sb, `import matplotlib.pyplot as plt
fig, axs = plt.subplots(1, 2)
axs[0].plot([1, 2], [3, 4], label='l')
axs[1].pie([1, 3])
plt.show()`)
		c = nil
		for _, r := range ex.Results {
			c = r.Chart()
		}
		if c == nil || c.Type != sandboxes.ChartSuperchart || len(c.Charts) != 2 || c.Charts[0].Type != sandboxes.ChartLine ||
			len(c.Charts[0].Elements) != 1 || len(c.Charts[0].Elements[0].Points) != 2 || c.Charts[1].Type != sandboxes.ChartPie || c.Charts[1].Elements[1].Angle != 270 {
			t.Fatalf("superchart: %+v (%v)", c, ex.Error)
		}
		ex = run(t, sb, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', None]})")
		df := ex.Results[0].DataFrame()
		if len(df) != 2 || len(df["a"]) != 2 || df["b"][0] != "x" || df["b"][1] != nil {
			t.Fatalf("DataFrame: %+v (%v)", ex.Results, ex.Error)
		}
	})

	t.Run("ContextsAreIsolated", func(t *testing.T) {
		c, err := sb.CreateContext(ctx, sandboxes.ContextOptions{})
		if err != nil {
			t.Fatal(err)
		}
		run(t, sb, "secret = 1", sandboxes.InContext(c))
		if ex := run(t, sb, "secret"); ex.Error == nil || ex.Error.Name != "NameError" {
			t.Fatalf("default context sees another context's state: %+v", ex.Error)
		}
		list, err := sb.Contexts(ctx)
		if err != nil || len(list) < 2 {
			t.Fatalf("contexts = %v, %v", list, err)
		}
		if err := sb.DeleteContext(ctx, c); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.RunCode(ctx, "1", sandboxes.InContext(c)); !errors.Is(err, sandboxes.ErrNotFound) {
			t.Errorf("run in deleted context: %v, want ErrNotFound", err)
		}
	})

	t.Run("EnvVars", func(t *testing.T) {
		ex := run(t, sb, "import os; print(os.environ.get('CS_PER_RUN'))", sandboxes.WithEnv(map[string]string{"CS_PER_RUN": "v1"}))
		if strings.TrimSpace(ex.Stdout()) != "v1" {
			t.Fatalf("per-execution env: %q", ex.Stdout())
		}
		ex = run(t, sb, "import os; print(os.environ.get('CS_PER_RUN'))")
		if strings.TrimSpace(ex.Stdout()) != "None" {
			t.Errorf("per-execution env leaked into the next one: %q", ex.Stdout())
		}
	})

	t.Run("Attachments", func(t *testing.T) {
		ex := run(t, sb, "print(open('/files/data.csv').read())", sandboxes.WithFiles(map[string][]byte{"data.csv": []byte("a,b\n1,2")}))
		if !strings.Contains(ex.Stdout(), "a,b") {
			t.Fatalf("attachment: %q %v", ex.Stdout(), ex.Error)
		}
		if _, err := sb.RunCode(ctx, "1", sandboxes.WithFiles(map[string][]byte{"../x": nil})); !errors.Is(err, sandboxes.ErrInvalidInput) {
			t.Errorf("traversal in attachment name: %v", err)
		}
	})

	t.Run("Files", func(t *testing.T) {
		f := sb.Files()
		if err := f.WriteBytes(ctx, "/home/user/dir/a.txt", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		b, err := f.ReadBytes(ctx, "/home/user/dir/a.txt")
		if err != nil || string(b) != "hello" {
			t.Fatalf("read back %q, %v", b, err)
		}
		if ex := run(t, sb, "print(open('/home/user/dir/a.txt').read())"); strings.TrimSpace(ex.Stdout()) != "hello" {
			t.Errorf("code doesn't see the written file: %q", ex.Stdout())
		}
		st, err := f.Stat(ctx, "/home/user/dir/a.txt")
		if err != nil || st.Size != 5 || st.Type != "file" {
			t.Errorf("stat = %+v, %v", st, err)
		}
		if st, err := f.Stat(ctx, "/home/user/dir"); err != nil || st.Type != "dir" || !st.Mode.IsDir() || !strings.HasPrefix(st.Mode.String(), "d") {
			t.Errorf("stat of a directory = %+v (mode %s), %v; want a directory mode", st, st.Mode, err)
		}
		if ok, err := f.Exists(ctx, "/home/user/nope"); ok || err != nil {
			t.Errorf("exists(nope) = %v, %v", ok, err)
		}
		if created, err := f.MakeDir(ctx, "/home/user/dir/sub"); !created || err != nil {
			t.Errorf("mkdir = %v, %v", created, err)
		}
		if created, err := f.MakeDir(ctx, "/home/user/dir/sub"); created || err != nil {
			t.Errorf("mkdir again = %v, %v", created, err)
		}
		list, err := f.List(ctx, "/home/user/dir", 1)
		if err != nil || len(list) != 2 {
			t.Errorf("list = %+v, %v", list, err)
		}
		if _, err := f.Rename(ctx, "/home/user/dir/a.txt", "/home/user/dir/b.txt"); err != nil {
			t.Error(err)
		}
		if _, err := f.ReadBytes(ctx, "/home/user/dir/a.txt"); !errors.Is(err, sandboxes.ErrNotFound) {
			t.Errorf("read after rename: %v, want ErrNotFound", err)
		}
		if err := f.Remove(ctx, "/home/user/dir"); err != nil {
			t.Error(err)
		}
		// A larger file streams both ways intact.
		big := make([]byte, 8<<20)
		_, _ = rand.Read(big)
		if err := f.Write(ctx, "/tmp/big.bin", bytes.NewReader(big)); err != nil {
			t.Fatal(err)
		}
		r, err := f.Read(ctx, "/tmp/big.bin")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r)
		r.Close()
		if !bytes.Equal(got, big) {
			t.Errorf("8 MiB round trip differs (got %d bytes)", len(got))
		}
	})

	t.Run("Watch", func(t *testing.T) {
		f := sb.Files()
		_, _ = f.MakeDir(ctx, "/home/user/watched")
		wctx, cancel := context.WithCancel(ctx)
		events := make(chan sandboxes.FileEvent, 16)
		wait, err := f.Watch(wctx, "/home/user/watched", false, func(e sandboxes.FileEvent) {
			select {
			case events <- e:
			default:
			}
		})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_ = f.WriteBytes(ctx, "/home/user/watched/new.txt", []byte("x"))
		select {
		case e := <-events:
			if !strings.Contains(e.Name, "new.txt") {
				t.Errorf("event %+v", e)
			}
		case <-time.After(10 * time.Second):
			t.Error("no watch event within 10s")
		}
		cancel()
		_ = wait()
	})

	t.Run("Commands", func(t *testing.T) {
		c := sb.Commands()
		res, err := c.Run(ctx, "echo out; echo err >&2; exit 4")
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 4 || res.Stdout != "out\n" || res.Stderr != "err\n" {
			t.Fatalf("run = %+v", res)
		}
		res, err = c.Run(ctx, "pwd; echo $CS_X", sandboxes.CommandCwd("/tmp"), sandboxes.CommandEnv(map[string]string{"CS_X": "y"}))
		if err != nil || res.Stdout != "/tmp\ny\n" {
			t.Fatalf("cwd/env = %+v, %v", res, err)
		}
		h, err := c.Start(ctx, "cat", sandboxes.CommandStdin())
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SendStdin(ctx, []byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		if err := h.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		res, err = h.Wait()
		if err != nil || res.Stdout != "ping\n" {
			t.Fatalf("cat = %+v, %v", res, err)
		}
		h, err = c.Start(ctx, "sleep 60", sandboxes.CommandTag("sleeper"))
		if err != nil {
			t.Fatal(err)
		}
		procs, err := c.List(ctx)
		found := false
		for _, p := range procs {
			found = found || p.Tag == "sleeper"
		}
		if err != nil || !found {
			t.Errorf("list = %+v, %v", procs, err)
		}
		if err := h.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		res, err = h.Wait()
		if err != nil || res.ExitCode == 0 {
			t.Errorf("killed sleep = %+v, %v", res, err)
		}
		res, err = c.Run(ctx, "sleep 30", sandboxes.CommandTimeout(500*time.Millisecond))
		if err == nil && res.ExitCode == 0 {
			t.Errorf("command outlived its timeout: %+v", res)
		}
	})

	// E2B's users write sandbox.commands.run("pip install …"): as the
	// sandbox user, on a Debian python marked externally managed (PEP 668).
	// It must say a package that is there is there, and install a new one
	// (from an index on the sandbox's own loopback: the sandbox stays
	// offline) that a new process and the kernel then import.
	t.Run("PipInstall", func(t *testing.T) {
		c := sb.Commands()
		res, err := c.Run(ctx, "command -v pip")
		Require(t, err == nil && res.ExitCode == 0, "pip in the sandbox's image (Debian's python3-pip)")
		res, err = c.Run(ctx, "pip install pip", sandboxes.CommandTimeout(2*time.Minute))
		if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "Requirement already satisfied") {
			t.Fatalf("pip install pip = %+v, %v", res, err)
		}
		const file = "cs_pipdemo-1.0-py3-none-any.whl"
		wheel := testpypi.Wheel(t, "cs_pipdemo", "1.0", "cs_pipdemo", "VALUE = 42\n")
		if err := sb.Files().WriteBytes(ctx, "/tmp/cs-index/simple/cs-pipdemo/"+file, wheel); err != nil {
			t.Fatal(err)
		}
		// A PEP 503 index: the directory listing links the wheel.
		idx, err := c.Start(ctx, `python3 -c 'import functools, http.server as h
s = h.HTTPServer(("127.0.0.1", 0), functools.partial(h.SimpleHTTPRequestHandler, directory="/tmp/cs-index"))
open("/tmp/cs-index.port", "w").write(str(s.server_port))
s.serve_forever()'`)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = idx.Kill(ctx) }()
		res, err = c.Run(ctx, "for i in $(seq 200); do [ -s /tmp/cs-index.port ] && break; sleep 0.05; done; cat /tmp/cs-index.port")
		if err != nil || res.ExitCode != 0 || res.Stdout == "" {
			t.Fatalf("the index did not start: %+v, %v", res, err)
		}
		env := sandboxes.CommandEnv(map[string]string{"PIP_INDEX_URL": "http://127.0.0.1:" + strings.TrimSpace(res.Stdout) + "/simple/"})
		res, err = c.Run(ctx, "pip install cs-pipdemo", env, sandboxes.CommandTimeout(2*time.Minute))
		if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "Successfully installed cs-pipdemo-1.0") {
			t.Fatalf("pip install cs-pipdemo = %+v, %v", res, err)
		}
		defer func() { _, _ = c.Run(ctx, "pip uninstall -y cs-pipdemo") }()
		res, err = c.Run(ctx, "pip install cs-pipdemo", env, sandboxes.CommandTimeout(2*time.Minute))
		if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "Requirement already satisfied: cs-pipdemo") {
			t.Fatalf("pip install cs-pipdemo again = %+v, %v", res, err)
		}
		res, err = c.Run(ctx, `python3 -c 'import cs_pipdemo; print(cs_pipdemo.VALUE)'`)
		if err != nil || res.Stdout != "42\n" {
			t.Fatalf("import in a new process = %+v, %v", res, err)
		}
		if ex := run(t, sb, "import cs_pipdemo\ncs_pipdemo.VALUE"); ex.Text() != "42" {
			t.Fatalf("import in the kernel = %q (error %v)", ex.Text(), ex.Error)
		}
	})
	t.Run("Terminal", func(t *testing.T) {
		term, err := sb.OpenTerminal(ctx, sandboxes.TerminalOptions{Cols: 100, Rows: 30})
		if errors.Is(err, sandboxes.ErrNotSupported) {
			t.Skipf("no terminals on this variant: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer term.Close()
		var mu sync.Mutex
		var out bytes.Buffer
		eof := make(chan struct{})
		go func() {
			defer close(eof)
			p := make([]byte, 4096)
			for {
				n, err := term.Read(p)
				mu.Lock()
				if out.Len() < 1<<20 {
					out.Write(p[:n])
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		waitFor := func(want string) {
			t.Helper()
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				mu.Lock()
				s := out.String()
				mu.Unlock()
				if strings.Contains(s, want) {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("terminal output has no %q: %q", want, s)
				}
			}
		}
		if _, err := term.Write([]byte("echo $((6*7)); stty size\n")); err != nil {
			t.Fatal(err)
		}
		waitFor("42\r\n30 100\r\n")
		if err := term.Resize(ctx, 120, 50); err != nil {
			t.Fatal(err)
		}
		if _, err := term.Write([]byte("stty size; exit 3\n")); err != nil {
			t.Fatal(err)
		}
		waitFor("50 120\r\n")
		select {
		case <-eof:
		case <-time.After(30 * time.Second):
			t.Fatal("terminal output did not end after exit")
		}
		if code, err := term.Wait(ctx); code != 3 || err != nil {
			t.Errorf("exit status = %d, %v; want 3", code, err)
		}
	})

	t.Run("Variables", func(t *testing.T) {
		if err := sb.SetVariable(ctx, "cfg", map[string]any{"n": 3, "name": "x"}); err != nil {
			t.Fatal(err)
		}
		if ex := run(t, sb, "cfg['n'] * 2"); ex.Text() != "6" {
			t.Fatalf("set variable not visible: %q %v", ex.Text(), ex.Error)
		}
		var out map[string]any
		if err := sb.GetVariable(ctx, "cfg", &out); err != nil || out["name"] != "x" {
			t.Fatalf("get = %v, %v", out, err)
		}
		// []byte arrives as Python bytes, not as JSON's base64 text.
		if err := sb.SetVariable(ctx, "blob", []byte{0, 1, 0xff}); err != nil {
			t.Fatal(err)
		}
		if ex := run(t, sb, "(type(blob).__name__, list(blob))"); ex.Text() != "('bytes', [0, 1, 255])" {
			t.Errorf("[]byte variable: %q %v", ex.Text(), ex.Error)
		}
		run(t, sb, "class Opaque: pass\no = Opaque()")
		var s string
		if err := sb.GetVariable(ctx, "o", &s); !errors.Is(err, sandboxes.ErrNotJSON) || !strings.Contains(s, "Opaque") {
			t.Errorf("repr fallback: %q, %v", s, err)
		}
		if err := sb.GetVariable(ctx, "nope_never_set", &out); !errors.Is(err, sandboxes.ErrNotFound) {
			t.Errorf("missing variable: %v", err)
		}
	})

	t.Run("Interrupt", func(t *testing.T) {
		run(t, sb, "kept = 7")
		done := make(chan *sandboxes.Execution, 1)
		go func() {
			ex, _ := sb.RunCode(ctx, "import time\nfor _ in range(600): time.sleep(0.1)")
			done <- ex
		}()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ok, err := sb.Interrupt(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ok || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		select {
		case ex := <-done:
			if ex == nil || !ex.Interrupted {
				t.Fatalf("not reported as interrupted: %+v", ex)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("interrupt did not stop the execution")
		}
		if ex := run(t, sb, "kept"); ex.Text() != "7" {
			t.Errorf("state lost after interrupt: %q", ex.Text())
		}
	})

	t.Run("ExecutionTimeout", func(t *testing.T) {
		ex := run(t, sb, "import time; time.sleep(60)", sandboxes.WithTimeout(time.Second))
		if ex.Success() || !ex.TimedOut {
			t.Fatalf("timeout not reported: %+v", ex.Error)
		}
		if ex := run(t, sb, "1 + 1"); ex.Text() != "2" {
			t.Errorf("context unusable after timeout: %q %v", ex.Text(), ex.Error)
		}
	})

	t.Run("KernelDeathRecovers", func(t *testing.T) {
		c, err := sb.CreateContext(ctx, sandboxes.ContextOptions{})
		if err != nil {
			t.Fatal(err)
		}
		run(t, sb, "v = 1", sandboxes.InContext(c))
		ex := run(t, sb, "import os; os._exit(9)", sandboxes.InContext(c))
		if ex.Error == nil {
			t.Fatalf("kernel death not reported")
		}
		ex = run(t, sb, "1 + 1", sandboxes.InContext(c))
		if ex.Text() != "2" || !strings.Contains(strings.ToLower(ex.Stderr()), "lost") {
			t.Errorf("after death: %q, stderr %q", ex.Text(), ex.Stderr())
		}
	})

	t.Run("HostReachesServerInside", func(t *testing.T) {
		h, err := sb.Commands().Start(ctx, "cd /tmp && echo served > index.html && exec python3 -m http.server 8765 --bind 127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		defer h.Kill(context.Background())
		addr, err := sb.Host(ctx, 8765)
		if errors.Is(err, sandboxes.ErrNotSupported) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		var body string
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			resp, err := http.Get("http://" + addr + "/index.html")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
				if resp.StatusCode == 200 {
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if strings.TrimSpace(body) != "served" {
			t.Fatalf("GET via Host(%s) = %q", addr, body)
		}
	})

	t.Run("InfoAndSetTimeout", func(t *testing.T) {
		info, err := sb.Info(ctx)
		if err != nil || info.ID != sb.ID() || info.Status != "running" {
			t.Fatalf("info = %+v, %v", info, err)
		}
		if err := sb.SetTimeout(ctx, 30*time.Minute); err != nil {
			t.Fatal(err)
		}
		info, _ = sb.Info(ctx)
		if d := time.Until(info.EndAt); d < 29*time.Minute || d > 31*time.Minute {
			t.Errorf("end after SetTimeout(30m) is in %s", d)
		}
	})

	t.Run("ListGetKillByTag", func(t *testing.T) {
		c := cfg
		tag := fmt.Sprintf("t%d", time.Now().UnixNano())
		c.Tags = map[string]string{"suite": tag}
		c.Name = "conf-" + tag
		other, err := sandboxes.Create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		list, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{Tags: c.Tags})
		if err != nil || len(list) != 1 || list[0].ID != other.ID() {
			t.Fatalf("list by tag = %+v, %v", list, err)
		}
		again, err := sandboxes.Get(ctx, cfg, c.Name)
		if err != nil {
			t.Fatal(err)
		}
		if ex, err := again.RunCode(ctx, "21 * 2"); err != nil || ex.Text() != "42" {
			t.Fatalf("reconnected sandbox: %v %v", ex, err)
		}
		_ = again.Detach()
		killed, err := sandboxes.Kill(ctx, cfg, "", sandboxes.ListOptions{Tags: c.Tags})
		if err != nil || len(killed) != 1 {
			t.Fatalf("kill by tag = %v, %v", killed, err)
		}
		if _, err := other.RunCode(ctx, "1"); err == nil {
			t.Error("killed sandbox still runs code")
		}
		if _, err := sandboxes.Get(ctx, cfg, other.ID()); !errors.Is(err, sandboxes.ErrNotFound) {
			t.Errorf("get killed = %v, want ErrNotFound", err)
		}
	})

	t.Run("ClosedSandboxRefuses", func(t *testing.T) {
		s2, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s2.RunCode(ctx, "1"); !errors.Is(err, sandboxes.ErrClosed) {
			t.Errorf("RunCode after Close = %v, want ErrClosed", err)
		}
		if err := s2.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
	})
}
