package jupyter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/jupytertest"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/jupyter"
)

// server is a real Jupyter Server the tests started: on 127.0.0.1, a
// random port and token, its root a temporary directory. The tests share
// it (a server takes seconds to start); each has a directory of its own
// in it, its sandboxes' working directory, and closes its sandboxes.
type server struct {
	url, token string
	root       string // the test's directory on disk
	dir        string // the same, relative to the server's root
}

var shared struct {
	once    sync.Once
	s       *server
	err     error
	cleanup func()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.cleanup != nil {
		shared.cleanup()
	}
	os.Exit(code)
}

// startServer gives the test its view of the shared server, started on
// first use.
func startServer(t *testing.T) *server {
	t.Helper()
	py := jupytertest.Python()
	testdep.Require(t, py != "", "no python3 with jupyter_server and ipykernel (apt-get install python3-jupyter-server)")
	shared.once.Do(func() {
		var js *jupytertest.Server
		js, shared.cleanup, shared.err = jupytertest.Launch(py)
		if js != nil {
			shared.s = &server{url: js.URL, token: js.Token, root: js.Root}
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	dir := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	root := filepath.Join(shared.s.root, dir)
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	return &server{url: shared.s.url, token: shared.s.token, root: root, dir: dir}
}

// get calls the server's API directly (the test's own view of it).
func (s *server) get(p string, out any) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, s.url+p, nil)
	req.Header.Set("Authorization", "token "+s.token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}

// kernels counts the server's running kernels.
func (s *server) kernels(t *testing.T) int {
	t.Helper()
	var ks []map[string]any
	if _, err := s.get("/api/kernels", &ks); err != nil {
		t.Fatal(err)
	}
	return len(ks)
}

func (s *server) cfg() sandboxes.Config {
	return sandboxes.Config{Variant: "jupyter", Options: jupyter.Options{URL: s.url, Token: s.token, Dir: s.dir}}
}

func create(t *testing.T, s *server, cfg sandboxes.Config) *sandboxes.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

func run(t *testing.T, sb *sandboxes.Sandbox, code string, opts ...sandboxes.RunOption) *sandboxes.Execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex, err := sb.RunCode(ctx, code, opts...)
	if err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	return ex
}

func TestJupyterExecute(t *testing.T) {
	s := startServer(t)
	sb := create(t, s, s.cfg())

	ex := run(t, sb, "import sys\nprint('hello')\nprint('oops', file=sys.stderr)\nx = 41\nx + 1")
	if ex.Error != nil {
		t.Fatalf("error: %+v", ex.Error)
	}
	if got := ex.Stdout(); got != "hello\n" {
		t.Errorf("stdout %q, want hello", got)
	}
	if got := ex.Stderr(); got != "oops\n" {
		t.Errorf("stderr %q, want oops", got)
	}
	if len(ex.Results) != 1 || !ex.Results[0].IsMainResult || ex.Results[0].Text() != "42" {
		t.Errorf("results %+v, want one main result 42", ex.Results)
	}
	if ex.ExecutionCount < 1 {
		t.Errorf("execution count %d", ex.ExecutionCount)
	}
	// State stays across calls.
	if ex := run(t, sb, "x * 2"); len(ex.Results) != 1 || ex.Results[0].Text() != "82" {
		t.Errorf("state lost: %+v", ex.Results)
	}
	ex = run(t, sb, "1/0")
	if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || !strings.Contains(ex.Error.Traceback, "ZeroDivisionError") {
		t.Errorf("error %+v, want ZeroDivisionError with a traceback", ex.Error)
	}
	// The kernel runs in the server's root, the sandbox's directory.
	if ex := run(t, sb, "import os; os.getcwd()"); len(ex.Results) != 1 || ex.Results[0].Text() != fmt.Sprintf("%q", s.root) && ex.Results[0].Text() != "'"+s.root+"'" {
		t.Errorf("cwd %+v, want %s", ex.Results, s.root)
	}
}

func TestJupyterContextsIsolated(t *testing.T) {
	s := startServer(t)
	sb := create(t, s, s.cfg())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := os.Mkdir(filepath.Join(s.root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := sb.CreateContext(ctx, sandboxes.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sb.CreateContext(ctx, sandboxes.ContextOptions{Cwd: "/" + s.dir + "/sub"})
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, "secret = 'a'", sandboxes.InContext(a))
	if ex := run(t, sb, "secret", sandboxes.InContext(b)); ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("context b sees context a's variable: %+v %+v", ex.Results, ex.Error)
	}
	if ex := run(t, sb, "secret"); ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("the default context sees context a's variable: %+v", ex.Results)
	}
	if ex := run(t, sb, "import os; os.getcwd()", sandboxes.InContext(b)); len(ex.Results) != 1 || !strings.Contains(ex.Results[0].Text(), filepath.Join(s.root, "sub")) {
		t.Errorf("context b's cwd %+v, want %s/sub", ex.Results, s.root)
	}
	// Each context is its own kernel: the default one and a, b.
	if n := s.kernels(t); n != 3 {
		t.Errorf("%d kernels on the server, want 3", n)
	}
	list, err := sb.Contexts(ctx)
	if err != nil || len(list) != 3 {
		t.Errorf("contexts %+v %v, want 3", list, err)
	}
	if err := sb.DeleteContext(ctx, b); err != nil {
		t.Fatal(err)
	}
	if n := s.kernels(t); n != 2 {
		t.Errorf("%d kernels after deleting a context, want 2", n)
	}
	if _, err := sb.RunCode(ctx, "1", sandboxes.InContext(b)); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("run in a deleted context: %v, want ErrNotFound", err)
	}
	if _, err := sb.CreateContext(ctx, sandboxes.ContextOptions{Cwd: "/" + s.dir + "/missing"}); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("context in a missing directory: %v, want ErrNotFound (not a kernel silently elsewhere)", err)
	}
	if _, err := sb.CreateContext(ctx, sandboxes.ContextOptions{Language: "cobol"}); !errors.Is(err, sandboxes.ErrInvalidInput) || !strings.Contains(err.Error(), "python3 (python)") {
		t.Errorf("context of a language the server lacks: %v, want ErrInvalidInput naming the server's kernels", err)
	}
}

func TestJupyterRichResults(t *testing.T) {
	s := startServer(t)
	sb := create(t, s, s.cfg())
	// A 1x1 PNG made by hand (no matplotlib needed), shown with IPython's
	// display machinery as a plot would be.
	code := `
import struct, zlib
from IPython.display import display, HTML, Image
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
png = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + chunk(b'IEND', b'')
display(HTML('<b>bold</b>'))
display(Image(data=png))
`
	ex := run(t, sb, code)
	if ex.Error != nil {
		t.Fatalf("error: %+v", ex.Error)
	}
	var html string
	var png []byte
	for _, r := range ex.Results {
		if r.IsMainResult {
			t.Errorf("a display marked as the main result: %+v", r)
		}
		if h := r.HTML(); h != "" {
			html = h
		}
		if p := r.PNG(); p != nil {
			png = p
		}
	}
	if html != "<b>bold</b>" {
		t.Errorf("text/html %q, want <b>bold</b> (results %+v)", html, ex.Results)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("image/png %q is not a PNG", png)
	}
	// A MIME type the library has no field for is kept, keyed by its type.
	ex = run(t, sb, "from IPython.display import display\ndisplay({'application/vnd.test+json': {'a': 1}, 'text/plain': 'x'}, raw=True)")
	if len(ex.Results) != 1 || ex.Results[0].Data["application/vnd.test+json"] == nil {
		t.Errorf("custom MIME type lost: %+v", ex.Results)
	}
}

func TestJupyterInterrupt(t *testing.T) {
	s := startServer(t)
	sb := create(t, s, s.cfg())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run(t, sb, "kept = 7")
	started := make(chan struct{}, 1)
	type res struct {
		ex  *sandboxes.Execution
		err error
	}
	done := make(chan res, 1)
	go func() {
		ex, err := sb.RunCode(ctx, "print('looping', flush=True)\nwhile True:\n    pass", sandboxes.OnStdout(func(sandboxes.OutputMessage) {
			select {
			case started <- struct{}{}:
			default:
			}
		}))
		done <- res{ex, err}
	}()
	select {
	case <-started:
	case r := <-done:
		t.Fatalf("the loop ended by itself: %+v %v", r.ex, r.err)
	case <-ctx.Done():
		t.Fatal("the loop never started")
	}
	was, err := sb.Interrupt(ctx)
	if err != nil || !was {
		t.Fatalf("interrupt: %v %v, want true", was, err)
	}
	var r res
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the loop still runs 30s after the interrupt")
	}
	if r.err != nil || !r.ex.Interrupted || r.ex.Error == nil || r.ex.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("interrupted execution: %+v %v, want Interrupted with KeyboardInterrupt", r.ex, r.err)
	}
	if ex := run(t, sb, "kept"); len(ex.Results) != 1 || ex.Results[0].Text() != "7" {
		t.Errorf("state lost by the interrupt: %+v", ex)
	}
	if was, err := sb.Interrupt(ctx); err != nil || was {
		t.Errorf("interrupt with nothing running: %v %v, want false", was, err)
	}
}

func TestJupyterTimeout(t *testing.T) {
	s := startServer(t)
	sb := create(t, s, s.cfg())
	run(t, sb, "kept = 1")
	start := time.Now()
	ex := run(t, sb, "import time\ntime.sleep(600)", sandboxes.WithTimeout(2*time.Second))
	if !ex.TimedOut || !ex.Interrupted {
		t.Errorf("sleep past its timeout: %+v, want TimedOut and Interrupted", ex)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("the timeout of 2s ended the execution after %s", d)
	}
	if ex := run(t, sb, "kept"); len(ex.Results) != 1 || ex.Results[0].Text() != "1" {
		t.Errorf("an interrupted execution lost the state: %+v", ex)
	}
	// Code deaf to SIGINT: the kernel is restarted, the state goes with it.
	ex = run(t, sb, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", sandboxes.WithTimeout(2*time.Second))
	if !ex.TimedOut {
		t.Errorf("a SIGINT-deaf loop past its timeout: %+v, want TimedOut", ex)
	}
	if ex := run(t, sb, "'kept' in dir()"); len(ex.Results) != 1 || ex.Results[0].Text() != "False" {
		t.Errorf("after the restart: %+v, want a fresh kernel", ex)
	}
	if ex := run(t, sb, "2+2"); len(ex.Results) != 1 || ex.Results[0].Text() != "4" {
		t.Errorf("the restarted kernel doesn't run: %+v", ex)
	}
}

func TestJupyterFiles(t *testing.T) {
	s := startServer(t)
	sb := create(t, s, s.cfg())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fs := sb.Files()
	text := []byte("héllo\nwörld\n")
	bin := make([]byte, 256*4)
	for n := range bin {
		bin[n] = byte(n)
	}
	abs := "/" + s.dir // the test's directory, absolute (from the server's root)
	if err := fs.WriteBytes(ctx, abs+"/data/deep/t.txt", text); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteBytes(ctx, "data/b.bin", bin); err != nil {
		t.Fatal(err)
	}
	// On the server's disk, byte for byte.
	for p, want := range map[string][]byte{"data/deep/t.txt": text, "data/b.bin": bin} {
		got, err := os.ReadFile(filepath.Join(s.root, p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s on disk: %q %v", p, got, err)
		}
	}
	for p, want := range map[string][]byte{abs + "/data/deep/t.txt": text, "data/b.bin": bin} {
		got, err := fs.ReadBytes(ctx, p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("read %s: %q %v", p, got, err)
		}
	}
	// The kernel sees them (same server, same directory).
	if ex := run(t, sb, "open('data/b.bin','rb').read() == bytes(range(256))*4"); len(ex.Results) != 1 || ex.Results[0].Text() != "True" {
		t.Errorf("the kernel doesn't see the upload: %+v", ex)
	}
	entries, err := fs.List(ctx, "data", 2)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, e := range entries {
		names[e.Path] = e.Type
	}
	if names[abs+"/data/b.bin"] != "file" || names[abs+"/data/deep"] != "dir" || names[abs+"/data/deep/t.txt"] != "file" {
		t.Errorf("list: %v", names)
	}
	st, err := fs.Stat(ctx, "data/b.bin")
	if err != nil || st.Size != int64(len(bin)) || st.Type != "file" {
		t.Errorf("stat: %+v %v", st, err)
	}
	if made, err := fs.MakeDir(ctx, "made/here"); err != nil || !made {
		t.Errorf("mkdir: %v %v", made, err)
	}
	if made, err := fs.MakeDir(ctx, "made/here"); err != nil || made {
		t.Errorf("mkdir again: %v %v, want false", made, err)
	}
	if _, err := fs.Rename(ctx, "data/b.bin", abs+"/made/b.bin"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.root, "made", "b.bin")); err != nil {
		t.Errorf("rename: %v", err)
	}
	if err := fs.Remove(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.root, "data")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed tree still there: %v", err)
	}
	if ok, err := fs.Exists(ctx, "data/deep/t.txt"); ok || err != nil {
		t.Errorf("exists after remove: %v %v", ok, err)
	}
	if err := fs.Remove(ctx, "data"); err != nil {
		t.Errorf("removing a missing path: %v, want nil", err)
	}
	if _, err := fs.ReadBytes(ctx, "nothing"); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("read a missing file: %v, want ErrNotFound", err)
	}
	// Paths stay inside the server's root.
	for _, p := range []string{"../outside", "/a/../../etc/passwd"} {
		if err := fs.WriteBytes(ctx, p, []byte("x")); !errors.Is(err, sandboxes.ErrInvalidInput) {
			t.Errorf("write %s: %v, want ErrInvalidInput", p, err)
		}
	}
	if err := fs.Remove(ctx, "/"); !errors.Is(err, sandboxes.ErrInvalidInput) {
		t.Errorf("remove /: %v, want ErrInvalidInput", err)
	}
}

func TestJupyterVariables(t *testing.T) {
	s := startServer(t)
	sb := create(t, s, s.cfg())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	in := map[string]any{"a": []any{1.0, "two", true, nil}, "quote": "it's \"x\"\n"}
	if err := sb.SetVariable(ctx, "v", in); err != nil {
		t.Fatal(err)
	}
	if ex := run(t, sb, "v['quote']"); len(ex.Results) != 1 || !strings.Contains(ex.Results[0].Text(), `it\'s "x"\n`) {
		t.Errorf("the kernel's v: %+v", ex.Results)
	}
	var out map[string]any
	if err := sb.GetVariable(ctx, "v", &out); err != nil {
		t.Fatal(err)
	}
	if b1, b2 := fmt.Sprint(in), fmt.Sprint(out); b1 != b2 {
		t.Errorf("round trip: %s, want %s", b2, b1)
	}
	if err := sb.SetVariable(ctx, "raw", []byte{0, 1, 255}); err != nil {
		t.Fatal(err)
	}
	if ex := run(t, sb, "raw == bytes([0, 1, 255])"); len(ex.Results) != 1 || ex.Results[0].Text() != "True" {
		t.Errorf("bytes variable: %+v", ex.Results)
	}
	run(t, sb, "nan = float('nan')")
	var r string
	if err := sb.GetVariable(ctx, "nan", &r); !errors.Is(err, sandboxes.ErrNotJSON) || r != "nan" {
		t.Errorf("NaN: %q %v, want its repr and ErrNotJSON", r, err)
	}
	if err := sb.GetVariable(ctx, "undefined_here", &out); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("missing variable: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"a.b", "x;import os", "class", "1x", ""} {
		if err := sb.SetVariable(ctx, bad, 1); err == nil {
			t.Errorf("variable name %q accepted", bad)
		}
	}
}

func TestJupyterEnv(t *testing.T) {
	s := startServer(t)
	cfg := s.cfg()
	cfg.Env = map[string]string{"SANDBOX_VAR": "it's\nset"}
	sb := create(t, s, cfg)
	if ex := run(t, sb, "import os; os.environ['SANDBOX_VAR']"); len(ex.Results) != 1 || ex.Results[0].Text() != `"it's\nset"` {
		t.Errorf("Env: %+v %+v", ex.Results, ex.Error)
	}
	if ex := run(t, sb, "import os; os.environ.get('ONCE')", sandboxes.WithEnv(map[string]string{"ONCE": "1"})); len(ex.Results) != 1 || ex.Results[0].Text() != "'1'" {
		t.Errorf("WithEnv: %+v", ex.Results)
	}
	if ex := run(t, sb, "import os; os.environ.get('ONCE')"); len(ex.Results) != 0 {
		t.Errorf("WithEnv outlived its execution: %+v", ex.Results)
	}
}

func TestJupyterWrongToken(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := sandboxes.Create(ctx, sandboxes.Config{Variant: "jupyter", Options: jupyter.Options{URL: s.url, Token: "wrong"}})
	if !errors.Is(err, sandboxes.ErrUnauthorized) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("wrong token: %v, want ErrUnauthorized naming the token", err)
	}
	if strings.Contains(err.Error(), s.token) {
		t.Errorf("the error shows the server's token: %v", err)
	}
	if n := s.kernels(t); n != 0 {
		t.Errorf("%d kernels after a refused create", n)
	}
	_, err = sandboxes.Create(ctx, sandboxes.Config{Variant: "jupyter", Options: jupyter.Options{URL: s.url}})
	if !errors.Is(err, sandboxes.ErrUnauthorized) {
		t.Errorf("no token: %v, want ErrUnauthorized", err)
	}
}

func TestJupyterRefusals(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for name, mod := range map[string]func(*sandboxes.Config){
		"network none": func(c *sandboxes.Config) { c.NetworkPolicy = sandboxes.NetworkNone },
		"network all":  func(c *sandboxes.Config) { c.NetworkPolicy = sandboxes.NetworkAll },
		"memory":       func(c *sandboxes.Config) { c.Memory = 256 << 20 },
		"cpu":          func(c *sandboxes.Config) { c.CPU = 1 },
		"pids":         func(c *sandboxes.Config) { c.Pids = 100 },
		"lifetime":     func(c *sandboxes.Config) { c.MaxLifetime = time.Hour },
		"idle timeout": func(c *sandboxes.Config) { c.IdleTimeout = time.Minute },
		"packages":     func(c *sandboxes.Config) { c.Packages = []string{"requests"} },
		"gvisor":       func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor },
		"auto pause":   func(c *sandboxes.Config) { c.AutoPause = true },
		"snapshot":     func(c *sandboxes.Config) { c.Snapshot = "snap" },
	} {
		cfg := s.cfg()
		mod(&cfg)
		sb, err := sandboxes.Create(ctx, cfg)
		if err == nil {
			_ = sb.Close()
		}
		if !errors.Is(err, sandboxes.ErrNotSupported) {
			t.Errorf("%s: %v, want ErrNotSupported", name, err)
		} else if !strings.Contains(err.Error(), "jupyter") {
			t.Errorf("%s: %v does not name the variant", name, err)
		}
	}
	envs, err := sandboxes.ListEnvironments(ctx, s.cfg())
	if err != nil || len(envs) == 0 || envs[0].Name != "python3" || envs[0].Variant != "jupyter" {
		t.Errorf("environments: %+v %v, want the server's python3 kernel spec", envs, err)
	}
	cfg := s.cfg()
	cfg.Environment = "no-such-kernel"
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("an Environment that is no kernel spec of the server: %v, want ErrNotFound", err)
	}
	if n := s.kernels(t); n != 0 {
		t.Errorf("%d kernels after refused creates", n)
	}
	sb := create(t, s, s.cfg())
	checks := map[string]error{}
	_, checks["commands"] = sb.Commands().Run(ctx, "echo hi")
	_, checks["host"] = sb.Host(ctx, 8080)
	checks["set timeout"] = sb.SetTimeout(ctx, time.Hour)
	checks["pause"] = sb.Pause(ctx)
	checks["snapshot"] = sb.Snapshot(ctx, "x")
	_, checks["watch"] = sb.Files().Watch(ctx, "/", false, func(sandboxes.FileEvent) {})
	checks["update network"] = sb.UpdateNetwork(ctx, sandboxes.Network{Policy: sandboxes.NetworkNone})
	for name, err := range checks {
		if !errors.Is(err, sandboxes.ErrNotSupported) {
			t.Errorf("%s: %v, want ErrNotSupported", name, err)
		}
	}
	info, err := sb.Info(ctx)
	if err != nil || info.Network != jupyter.Network || info.Memory != 0 {
		t.Errorf("info %+v %v: want network %q (the server's own) and no memory limit", info, err, jupyter.Network)
	}
}

func TestJupyterNothingLeft(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := s.cfg()
	cfg.Name = "left"
	cfg.Tags = map[string]string{"suite": "jupyter"}
	sb := create(t, s, cfg)
	if _, err := sb.CreateContext(ctx, sandboxes.ContextOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, sb, "y = 5")
	if n := s.kernels(t); n != 2 {
		t.Fatalf("%d kernels, want 2", n)
	}
	// Another process finds the sandbox through the server.
	list, err := sandboxes.List(ctx, s.cfg(), sandboxes.ListOptions{Tags: map[string]string{"suite": "jupyter"}})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID() || list[0].Name != "left" {
		t.Fatalf("list: %+v %v", list, err)
	}
	again, err := sandboxes.Get(ctx, s.cfg(), "left")
	if err != nil {
		t.Fatal(err)
	}
	if ex := run(t, again, "y"); len(ex.Results) != 1 || ex.Results[0].Text() != "5" {
		t.Errorf("reconnected sandbox lost the state: %+v", ex)
	}
	if err := again.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.kernels(t); n != 0 {
		t.Errorf("%d kernels left running after Close", n)
	}
	var ss []map[string]any
	if _, err := s.get("/api/sessions", &ss); err != nil || len(ss) != 0 {
		t.Errorf("sessions left after Close: %v %v", ss, err)
	}
	if list, err := sandboxes.List(ctx, s.cfg(), sandboxes.ListOptions{}); err != nil || len(list) != 0 {
		t.Errorf("list after Close: %+v %v", list, err)
	}
	if _, err := sb.RunCode(ctx, "1"); !errors.Is(err, sandboxes.ErrClosed) {
		t.Errorf("run after Close: %v, want ErrClosed", err)
	}
	// Kill by id from another process ends them too.
	sb2 := create(t, s, s.cfg())
	if ids, err := sandboxes.Kill(ctx, s.cfg(), sb2.ID(), sandboxes.ListOptions{}); err != nil || len(ids) != 1 {
		t.Fatalf("kill: %v %v", ids, err)
	}
	if n := s.kernels(t); n != 0 {
		t.Errorf("%d kernels left after Kill", n)
	}
}

// TestJupyterHugeMessage: a kernel message past the variant's bound (32
// MiB) ends the execution with an error, not with the memory of the
// caller; the sandbox works on afterwards.
func TestJupyterHugeMessage(t *testing.T) {
	s := startServer(t)
	sb := create(t, s, s.cfg())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A comm_open: the server rate-limits streams and displays, not comms.
	ex, err := sb.RunCode(ctx, "from ipykernel.comm import Comm\nComm(target_name='big', data={'x': 'x' * (40 << 20)})")
	if err == nil {
		t.Fatalf("a 40 MiB message was accepted: %+v", ex)
	}
	if !errors.Is(err, sandboxes.ErrUnavailable) {
		t.Errorf("huge message: %v, want ErrUnavailable", err)
	}
	if ex := run(t, sb, "1+1"); len(ex.Results) != 1 || ex.Results[0].Text() != "2" {
		t.Errorf("after the huge message: %+v", ex)
	}
}

// TestJupyterForeignSessions: the server's other sessions (a notebook's,
// or one named like ours but malformed) are neither listed nor shut down.
func TestJupyterForeignSessions(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := `{"path": "` + s.dir + `/x.ipynb", "type": "notebook", "name": "code-sandboxes {\"sandbox\":\"../../x\",\"context\":\"default\"}", "kernel": {"name": "python3"}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/api/sessions", strings.NewReader(body))
	req.Header.Set("Authorization", "token "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var foreign struct {
		ID string `json:"id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&foreign)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || foreign.ID == "" {
		t.Fatalf("foreign session: %d", resp.StatusCode)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, s.url+"/api/sessions/"+foreign.ID, nil)
		req.Header.Set("Authorization", "token "+s.token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	sb := create(t, s, s.cfg())
	list, err := sandboxes.List(ctx, s.cfg(), sandboxes.ListOptions{})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID() {
		t.Errorf("list: %+v %v, want only the sandbox", list, err)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.kernels(t); n != 1 {
		t.Errorf("%d kernels after Close, want the foreign one", n)
	}
}
