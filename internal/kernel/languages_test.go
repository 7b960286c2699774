package kernel

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func needInterpreter(t testing.TB, lang string) {
	t.Helper()
	if err := CheckLanguage(context.Background(), lang, nil); err != nil {
		if _, e := exec.LookPath(interpreters[lang]); e == nil {
			t.Fatalf("%s: %v", lang, err)
		}
		t.Skipf("%v", err) // CI installs bash and node (scripts/install-deps.sh)
	}
}

func langSession(t *testing.T, lang string) *Session {
	needInterpreter(t, lang)
	// The kernel's temporary files in a directory of the test's own (made
	// before the session, so removed after its Close): a closed session's
	// kernel ends with SIGKILL, and R's session directory
	// (TMPDIR/RtmpXXXXXX) stayed in the host's /tmp.
	tmp := t.TempDir()
	return newTestSession(t, func(o *Options) {
		o.Language = lang
		// Generous: every test here wants the interrupt to work without a
		// kill, and a busy host can slow an interpreter's answer to it.
		o.KillGrace = 10 * time.Second
		o.Env = append(os.Environ(), "TMPDIR="+tmp)
	})
}

func TestBashKernel(t *testing.T) {
	s := langSession(t, "bash")
	r := exec1(t, s, "X=41\ncd /tmp\necho one; echo two >&2")
	noErrors(t, "bash", r)
	if r.stdout() != "one\n" || r.stderr() != "two\n" {
		t.Fatalf("streams %q %q", r.stdout(), r.stderr())
	}
	r = exec1(t, s, "echo $((X+1)) $PWD")
	if r.stdout() != "42 /tmp\n" {
		t.Fatalf("state: %q", r.stdout())
	}
	r = execReq(t, s, Request{Code: "echo $CS_ONE", EnvVars: map[string]string{"CS_ONE": "it's scoped"}})
	if r.stdout() != "it's scoped\n" {
		t.Fatalf("env var: %q", r.stdout())
	}
	if r := exec1(t, s, "echo ${CS_ONE:-unset}"); r.stdout() != "unset\n" {
		t.Fatalf("env var leaked: %q", r.stdout())
	}
	r = exec1(t, s, "false")
	if errs := r.errors(); len(errs) != 1 || errs[0].Name != "BashError" || errs[0].Value != "exit status 1" {
		t.Fatalf("failing cell: %+v", r.errors())
	}
	if r := exec1(t, s, "cat; echo read-nothing"); r.stdout() != "read-nothing\n" {
		t.Fatalf("stdin must be empty: %q", r.stdout())
	}
	intr := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(intr) })
	r = execReq(t, s, Request{Code: "echo start; sleep 30; echo never", Interrupt: intr})
	if strings.Contains(r.stdout(), "never") || r.out.KernelDied || len(r.errors()) == 0 {
		t.Fatalf("interrupt: %+v %+v", r.out, r.events)
	}
	// bash returns from the cell through its INT trap and keeps its state;
	// if it does not report within a second it is ended, and says so.
	lost := false
	for _, e := range r.errors() {
		lost = lost || strings.Contains(e.Value, "state is lost")
	}
	if r := exec1(t, s, "echo ${X:-lost}"); r.stdout() != "41\n" && !(lost && r.stdout() == "lost\n") {
		t.Fatalf("state after interrupt: %q (lost: %v)", r.stdout(), lost)
	}
	r = exec1(t, s, "exit 3")
	if r.out.ExitCode == nil || *r.out.ExitCode != 3 || !strings.Contains(r.stderr(), "state is gone") {
		t.Fatalf("exit: %+v %q", r.out, r.stderr())
	}
	if r := exec1(t, s, "echo again ${X:-fresh}"); r.stdout() != "again fresh\n" {
		t.Fatalf("after exit: %q %q", r.stdout(), r.stderr())
	}
}

func TestJavaScriptKernel(t *testing.T) {
	s := langSession(t, "javascript")
	r := exec1(t, s, "let x = 40\nconsole.log('hi'); console.error('err')\nx + 2")
	noErrors(t, "js", r)
	if r.stdout() != "hi\n" || r.stderr() != "err\n" || mainText(t, r) != "42" {
		t.Fatalf("first cell: %q %q %q", r.stdout(), r.stderr(), mainText(t, r))
	}
	for _, c := range [][2]string{
		{"x", "40"},
		{"await Promise.resolve('done')", "'done'"},
		{"import { basename } from 'path'\nbasename('/a/b.txt')", "'b.txt'"},
		{"import * as os from 'os'\ntypeof os.cpus", "'function'"},
		{"const v = await Promise.resolve(7)\nv * 2", "14"},
		{"v + 1", "8"},
	} {
		r := exec1(t, s, c[0])
		noErrors(t, c[0], r)
		if got := mainText(t, r); got != c[1] {
			t.Errorf("%q: %q, want %q", c[0], got, c[1])
		}
	}
	r = exec1(t, s, "function f() { throw new TypeError('bad') }\nf()")
	if errs := r.errors(); len(errs) != 1 || errs[0].Name != "TypeError" || errs[0].Value != "bad" || !strings.Contains(errs[0].Traceback, "at f") {
		t.Fatalf("error: %+v", r.errors())
	}
	r = execReq(t, s, Request{Code: "process.env.CS_TWO", EnvVars: map[string]string{"CS_TWO": "scoped"}})
	if mainText(t, r) != "'scoped'" {
		t.Fatalf("env var: %q", mainText(t, r))
	}
	if got := mainText(t, exec1(t, s, "String(process.env.CS_TWO)")); got != "'undefined'" {
		t.Fatalf("env var leaked: %q", got)
	}
	for _, code := range []string{"for (;;) {}", "await new Promise(() => {})"} {
		r = execReq(t, s, Request{Code: code, Timeout: time.Second})
		if r.out.KernelDied || len(r.errors()) == 0 {
			t.Fatalf("interrupt %q: %+v %+v", code, r.out, r.errors())
		}
		if got := mainText(t, exec1(t, s, "x + 1")); got != "41" {
			t.Fatalf("state after interrupting %q: %q", code, got)
		}
	}
}

// TestTypeScriptKernel: TypeScript cells (types, interfaces, enums, imports
// kept for later cells, top-level await), state between cells, a syntax
// error as the cell's SyntaxError, a runtime error with its traceback, and
// interrupt. On node before 22.6 it runs on the typescript package (Debian's
// node-typescript, which scripts/install-deps.sh brings).
func TestTypeScriptKernel(t *testing.T) {
	s := langSession(t, "typescript")
	r := exec1(t, s, "const message: string = \"Hello World!\"; console.log(message)")
	noErrors(t, "ts", r)
	if r.stdout() != "Hello World!\n" {
		t.Fatalf("first cell: %q", r.stdout())
	}
	for _, c := range [][2]string{
		{"interface P { x: number }\nlet p: P = { x: 40 }\np.x + 2", "42"},
		{"p.x", "40"},
		{"enum Color { Red, Green }\nColor.Green", "1"},
		{"import { basename } from 'path'", ""},
		{"basename('/a/b.txt' as string)", "'b.txt'"},
		{"const v: number = await Promise.resolve(7)\nv * 2", "14"},
		{"function sq<T extends number>(n: T): number { return n * n }\nsq(9)", "81"},
		{"typeof process.cwd()", "'string'"},
	} {
		r := exec1(t, s, c[0])
		noErrors(t, c[0], r)
		if c[1] == "" {
			continue
		}
		if got := mainText(t, r); got != c[1] {
			t.Errorf("%q: %q, want %q", c[0], got, c[1])
		}
	}
	r = exec1(t, s, "const = 5")
	if errs := r.errors(); len(errs) != 1 || errs[0].Name != "SyntaxError" {
		t.Fatalf("syntax error: %+v", r.errors())
	}
	r = exec1(t, s, "function f(): never { throw new TypeError('bad') }\nf()")
	if errs := r.errors(); len(errs) != 1 || errs[0].Name != "TypeError" || !strings.Contains(errs[0].Traceback, "at f") {
		t.Fatalf("error: %+v", r.errors())
	}
	r = execReq(t, s, Request{Code: "for (;;) {}", Timeout: time.Second})
	if r.out.KernelDied || len(r.errors()) == 0 {
		t.Fatalf("interrupt: %+v %+v", r.out, r.errors())
	}
	if got := mainText(t, exec1(t, s, "p.x + 1")); got != "41" {
		t.Fatalf("state after the interrupt: %q", got)
	}
}

// TestJavaKernel: Java cells through JShell: state, output, the last
// expression's value (strings unquoted, as E2B's kernel shows them),
// variables as system properties (the cell's for the cell only), compile
// and runtime errors, interrupt.
func TestJavaKernel(t *testing.T) {
	s := langSession(t, "java")
	r := exec1(t, s, "System.out.println(\"hi\");\nint x = 40;\nx + 2")
	noErrors(t, "java", r)
	if r.stdout() != "hi\n" || mainText(t, r) != "42" {
		t.Fatalf("first cell: %q %q", r.stdout(), mainText(t, r))
	}
	for _, c := range [][2]string{
		{"x", "40"},
		{"String s = \"a\\nb\"; s", "a\nb"},
		{"import java.util.*;\nList<Integer> l = new ArrayList<>(List.of(3, 1, 2)); Collections.sort(l); l", "[1, 2, 3]"},
		{"System.getProperty(\"CS_J\", \"default\")", "default"},
	} {
		r := exec1(t, s, c[0])
		noErrors(t, c[0], r)
		if got := mainText(t, r); got != c[1] {
			t.Errorf("%q: %q, want %q", c[0], got, c[1])
		}
	}
	r = execReq(t, s, Request{Code: "System.getProperty(\"CS_J\")", EnvVars: map[string]string{"CS_J": "scoped"}})
	if mainText(t, r) != "scoped" {
		t.Fatalf("per-execution variable: %q %+v", mainText(t, r), r.errors())
	}
	if got := mainText(t, exec1(t, s, "System.getProperty(\"CS_J\", \"gone\")")); got != "gone" {
		t.Fatalf("the cell's variable outlived it: %q", got)
	}
	r = exec1(t, s, "int y = ;")
	if errs := r.errors(); len(errs) != 1 || errs[0].Name != "CompilationException" {
		t.Fatalf("compile error: %+v", r.errors())
	}
	r = exec1(t, s, "Object o = null; o.toString()")
	if errs := r.errors(); len(errs) != 1 || errs[0].Name != "NullPointerException" {
		t.Fatalf("runtime error: %+v", r.errors())
	}
	r = execReq(t, s, Request{Code: "while (true) {}", Timeout: 2 * time.Second})
	if r.out.KernelDied || len(r.errors()) == 0 {
		t.Fatalf("interrupt: %+v %+v", r.out, r.errors())
	}
	if got := mainText(t, exec1(t, s, "x + 1")); got != "41" {
		t.Fatalf("state after the interrupt: %q", got)
	}
}

// TestLanguageOutputShape: each language's stdout and results as E2B's
// kernels give them, in the cases E2B's own tests check (code-interpreter
// python/tests/sync/test_default_kernels.py, env_vars/, js/tests): Java
// (IJava, whose PrintStream sends every write as its own message) gives
// println's text and its newline as two chunks, so stdout[0] is the line
// without it; JavaScript, TypeScript, bash and R one chunk per line; R's
// value shown as R prints it.
func TestLanguageOutputShape(t *testing.T) {
	t.Run("java", func(t *testing.T) {
		s := langSession(t, "java")
		// The first cell starts the JVM and JShell: on a busy host that
		// takes longer than execReq waits.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var r run
		if _, err := s.Execute(ctx, Request{Code: "1"}, func(Event) {}); err != nil {
			t.Fatal(err)
		}
		r = exec1(t, s, `System.out.println("Hello, World!")`)
		noErrors(t, "java", r)
		if got := r.chunks(EventStdout); len(got) == 0 || got[0] != "Hello, World!" || r.stdout() != "Hello, World!\n" {
			t.Errorf("println: stdout %q, want first %q and all %q", got, "Hello, World!", "Hello, World!\n")
		}
		r = exec1(t, s, `System.out.print("a"); System.out.print("b"); System.err.println("e"); System.out.println(1 + 1)`)
		noErrors(t, "java", r)
		if r.stdout() != "ab2\n" || r.stderr() != "e\n" {
			t.Errorf("print and println: stdout %q, stderr %q", r.stdout(), r.stderr())
		}
		// A long write arrives whole, in bounded chunks.
		r = exec1(t, s, `System.out.print("x".repeat(200000))`)
		noErrors(t, "java", r)
		if got := r.stdout(); got != strings.Repeat("x", 200000) {
			t.Errorf("a long print: %d bytes", len(got))
		}
		// Output of a thread the cell started, after the cell: still shown.
		r = exec1(t, s, `Thread th = new Thread(() -> System.out.println("from a thread")); th.start(); th.join();`)
		noErrors(t, "java", r)
		if r.stdout() != "from a thread\n" {
			t.Errorf("a thread's println: %q", r.stdout())
		}
	})
	t.Run("javascript", func(t *testing.T) {
		s := langSession(t, "javascript")
		if got := exec1(t, s, "console.log('Hello, World!')").chunks(EventStdout); len(got) != 1 || got[0] != "Hello, World!\n" {
			t.Errorf("console.log: %q", got)
		}
	})
	t.Run("typescript", func(t *testing.T) {
		s := langSession(t, "typescript")
		if got := exec1(t, s, "const message: string = 'Hello, World!'; console.log(message)").chunks(EventStdout); len(got) != 1 || got[0] != "Hello, World!\n" {
			t.Errorf("console.log: %q", got)
		}
	})
	t.Run("bash", func(t *testing.T) {
		s := langSession(t, "bash")
		r := execReq(t, s, Request{Code: "echo $FOO", EnvVars: map[string]string{"FOO": "bar"}})
		if got := r.chunks(EventStdout); len(got) == 0 || got[0] != "bar\n" {
			t.Errorf("echo: %q", got)
		}
	})
	t.Run("r", func(t *testing.T) {
		s := langSession(t, "r")
		if got := exec1(t, s, `print("Hello, World!")`).chunks(EventStdout); len(got) != 1 || got[0] != "[1] \"Hello, World!\"\n" {
			t.Errorf("print: %q", got)
		}
		if got := mainText(t, exec1(t, s, `Sys.getenv("FOO", unset = "default")`)); got != `[1] "default"` {
			t.Errorf("value: %q", got)
		}
	})
}

func TestLanguageRefused(t *testing.T) {
	for _, lang := range []string{"cobol", "fortran"} {
		err := CheckLanguage(context.Background(), lang, nil)
		if !errors.Is(err, ErrLanguageUnavailable) || !strings.Contains(err.Error(), lang) {
			t.Errorf("%s: %v", lang, err)
		}
	}
	if err := CheckLanguage(context.Background(), "javascript", []string{"PATH=/nonexistent"}); !errors.Is(err, ErrLanguageUnavailable) || !strings.Contains(err.Error(), "node") {
		t.Errorf("javascript without node: %v", err)
	}
	if err := CheckLanguage(context.Background(), "java", []string{"PATH=/nonexistent"}); !errors.Is(err, ErrLanguageUnavailable) || !strings.Contains(err.Error(), "java") {
		t.Errorf("java without a JDK: %v", err)
	}
}

func TestRKernel(t *testing.T) {
	s := langSession(t, "r")
	r := exec1(t, s, "x <- 40\ncat('out\\n'); message('err')\nx + 2")
	noErrors(t, "r", r)
	if r.stdout() != "out\n" || r.stderr() != "err\n" || mainText(t, r) != "[1] 42" {
		t.Fatalf("first cell: %q %q %q", r.stdout(), r.stderr(), mainText(t, r))
	}
	if got := mainText(t, exec1(t, s, "x * 2")); got != "[1] 80" {
		t.Fatalf("state: %q", got)
	}
	r = execReq(t, s, Request{Code: "Sys.getenv('CS_R')", EnvVars: map[string]string{"CS_R": "scoped"}})
	if got := mainText(t, r); got != `[1] "scoped"` {
		t.Fatalf("env var: %q", got)
	}
	if got := mainText(t, exec1(t, s, "Sys.getenv('CS_R', unset = 'default')")); got != `[1] "default"` {
		t.Fatalf("env var leaked: %q", got)
	}
	r = exec1(t, s, "stop('bad thing')")
	if errs := r.errors(); len(errs) != 1 || errs[0].Name != "RError" || errs[0].Value != "bad thing" {
		t.Fatalf("error: %+v", r.errors())
	}
	r = exec1(t, s, "warning('careful'); 1")
	if !strings.Contains(r.stderr(), "careful") || mainText(t, r) != "[1] 1" {
		t.Fatalf("warning: %q %q", r.stderr(), mainText(t, r))
	}
	intr := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(intr) })
	r = execReq(t, s, Request{Code: "Sys.sleep(30); 'never'", Interrupt: intr})
	if r.out.KernelDied || len(r.errors()) == 0 || mainText(t, r) != "" {
		t.Fatalf("interrupt: %+v %+v", r.out, r.errors())
	}
	if got := mainText(t, exec1(t, s, "x")); got != "[1] 40" {
		t.Fatalf("state after interrupt: %q (interrupted cell: %+v, stderr %q)", got, r.errors(), r.stderr())
	}
}

// Per-run env vars on the very first cell (which starts the interpreter)
// must not stay in the interpreter's environment.
func TestLanguageFirstCellEnv(t *testing.T) {
	for lang, code := range map[string]string{"bash": "echo ${CS_FIRST:-unset}", "javascript": "console.log(process.env.CS_FIRST || 'unset')", "r": "cat(Sys.getenv('CS_FIRST', unset = 'unset'), '\\n', sep = '')"} {
		t.Run(lang, func(t *testing.T) {
			s := langSession(t, lang)
			if r := execReq(t, s, Request{Code: code, EnvVars: map[string]string{"CS_FIRST": "set"}}); r.stdout() != "set\n" {
				t.Fatalf("with the env var: %q %+v", r.stdout(), r.errors())
			}
			if r := exec1(t, s, code); r.stdout() != "unset\n" {
				t.Fatalf("next cell: %q", r.stdout())
			}
		})
	}
}
