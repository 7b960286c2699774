package sandboxes_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// termOutput collects a terminal's output in the background, so that a
// test waits for what it expects with a bound instead of in a blocking Read.
type termOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	eof  chan struct{}
	from int // what earlier waits consumed
}

func collect(term io.Reader) *termOutput {
	o := &termOutput{eof: make(chan struct{})}
	go func() {
		defer close(o.eof)
		p := make([]byte, 4096)
		for {
			n, err := term.Read(p)
			o.mu.Lock()
			if o.buf.Len() < 1<<20 {
				o.buf.Write(p[:n])
			}
			o.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return o
}

// waitFor waits up to d for want in the output after the last match.
func (o *termOutput) waitFor(t *testing.T, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		o.mu.Lock()
		s := o.buf.String()[o.from:]
		if i := strings.Index(s, want); i >= 0 {
			o.from += i + len(want)
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("terminal output has no %q after %v; it has %q", want, d, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (o *termOutput) waitEOF(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-o.eof:
	case <-time.After(d):
		t.Fatalf("terminal output did not end within %v", d)
	}
}

func typeIn(t *testing.T, term *sandboxes.Terminal, s string) {
	t.Helper()
	if _, err := term.Write([]byte(s)); err != nil {
		t.Fatalf("typing %q: %v", s, err)
	}
}

// A login shell on a pseudo-terminal in a real local sandbox: input,
// output, size and resize as `stty size` sees them, ^C interrupting a
// foreground job, a second handle attached by pid, the exit status, and
// Kill ending it with Read at EOF.
func TestTerminalLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a sandbox")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, localConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()

	term, err := sb.OpenTerminal(ctx, sandboxes.TerminalOptions{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	out := collect(term)

	typeIn(t, term, "echo $((6*7))\n")
	out.waitFor(t, "\r42\r\n", 30*time.Second)
	typeIn(t, term, "stty size; tty; echo $TERM\n")
	out.waitFor(t, "\r30 100\r\n/dev/pts/", 10*time.Second)
	out.waitFor(t, "xterm-256color\r\n", 10*time.Second)

	if err := term.Resize(ctx, 120, 50); err != nil {
		t.Fatal(err)
	}
	typeIn(t, term, "stty size\n")
	out.waitFor(t, "\r50 120\r\n", 10*time.Second)
	if err := term.Resize(ctx, 0, 50); !errors.Is(err, sandboxes.ErrInvalidInput) {
		t.Errorf("Resize to 0 columns: err = %v, want ErrInvalidInput", err)
	}

	// ^C goes to the foreground job (the terminal's line discipline sends
	// SIGINT to it), not to the shell: the shell goes on.
	start := time.Now()
	typeIn(t, term, "sleep 60; echo slept\n")
	time.Sleep(500 * time.Millisecond)
	typeIn(t, term, "\x03")
	typeIn(t, term, "echo after-$((1+2))\n")
	out.waitFor(t, "after-3\r\n", 20*time.Second)
	if time.Since(start) > 30*time.Second {
		t.Errorf("^C did not interrupt sleep: %v", time.Since(start))
	}

	// A second handle by pid sees the output from now on and can type.
	again, err := sb.ConnectTerminal(ctx, term.Pid)
	if err != nil {
		t.Fatal(err)
	}
	out2 := collect(again)
	typeIn(t, again, "echo conn-$((2*5))\n")
	out2.waitFor(t, "conn-10\r\n", 10*time.Second)
	out.waitFor(t, "conn-10\r\n", 10*time.Second)
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	out2.waitEOF(t, 10*time.Second)
	// Letting go of a handle doesn't end the program.
	typeIn(t, term, "echo still-$((3*3))\n")
	out.waitFor(t, "still-9\r\n", 10*time.Second)

	if err := term.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	out.waitEOF(t, 20*time.Second)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	code, err := term.Wait(wctx)
	if err != nil || code == 0 {
		t.Errorf("Wait after Kill = %d, %v; want a non-zero status and no error", code, err)
	}
	if _, err := sb.ConnectTerminal(ctx, term.Pid); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("ConnectTerminal to a killed pid: err = %v, want ErrNotFound", err)
	}

	// The program's own exit status; a command, working dir and env.
	sh, err := sb.OpenTerminal(ctx, sandboxes.TerminalOptions{Cmd: []string{"/bin/sh", "-c", `pwd; echo "$GREETING"; read line; exit "$line"`},
		Cwd: "/tmp", Env: map[string]string{"GREETING": "hi-there"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	shOut := collect(sh)
	shOut.waitFor(t, "/tmp\r\nhi-there\r\n", 10*time.Second)
	typeIn(t, sh, "7\n")
	shOut.waitEOF(t, 10*time.Second)
	if code, err := sh.Wait(wctx); code != 7 || err != nil {
		t.Errorf("exit status = %d, %v; want 7", code, err)
	}

	if _, err := sb.OpenTerminal(ctx, sandboxes.TerminalOptions{Cols: 80}); !errors.Is(err, sandboxes.ErrInvalidInput) {
		t.Errorf("OpenTerminal with columns and no rows: err = %v, want ErrInvalidInput", err)
	}
}
