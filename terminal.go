package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
)

// TerminalOptions configure OpenTerminal.
type TerminalOptions struct {
	// Cols and Rows are the terminal's size; both 0 means 80x24.
	Cols, Rows uint16
	// Cmd is the program and its arguments; empty means a login shell
	// (/bin/bash -i -l), as E2B's sandbox.pty.create.
	Cmd []string
	// Env adds to the sandbox's environment. TERM defaults to
	// xterm-256color and LANG and LC_ALL to C.UTF-8, as on E2B.
	Env map[string]string
	// Cwd is the working directory; "" means the sandbox's.
	Cwd string
}

// Terminal is a program running on a pseudo-terminal in the sandbox (E2B's
// sandbox.pty). Read returns what the program writes to its terminal (io.EOF
// once it has ended and all of it was read); Write types into it. Its life
// is not bound to this handle: Close only lets go of it (ConnectTerminal
// attaches again by Pid), Kill ends it, and it ends with the sandbox.
type Terminal struct {
	Pid uint32

	rpc    *client.Client
	out    chan []byte // bounded: a reader that falls behind holds the stream back
	rest   []byte      // the part of a chunk a short Read left
	done   chan struct{}
	cancel context.CancelFunc

	mu       sync.Mutex
	exitCode int
	exitErr  error
}

// Bounds of a terminal: chunks queued for Read (each at most what envd
// reads at once), one input message, and each call a Write makes.
const (
	terminalQueue      = 64
	terminalInputChunk = 32 << 10
	terminalCallWait   = 30 * time.Second
	// terminalKeepalive asks envd for a keepalive on a silent terminal,
	// well inside the idle limits of proxies (serve's, E2B's).
	terminalKeepalive = 30 * time.Second
)

func (s *Sandbox) terminalRPC() (*client.Client, error) {
	if !s.variant.Capabilities().Commands {
		return nil, fmt.Errorf("terminal: %w (%s)", ErrNotSupported, s.variant.Name())
	}
	return s.conn()
}

// OpenTerminal starts a program (a login shell by default) on a new
// pseudo-terminal in the sandbox. ctx bounds the start only.
func (s *Sandbox) OpenTerminal(ctx context.Context, o TerminalOptions) (*Terminal, error) {
	rpc, err := s.terminalRPC()
	if err != nil {
		return nil, err
	}
	if (o.Cols == 0) != (o.Rows == 0) {
		return nil, fmt.Errorf("%w: terminal size %dx%d: give both columns and rows, or neither for 80x24", ErrInvalidInput, o.Cols, o.Rows)
	}
	if o.Cols == 0 {
		o.Cols, o.Rows = 80, 24
	}
	cmd := o.Cmd
	if len(cmd) == 0 {
		cmd = []string{"/bin/bash", "-i", "-l"}
	}
	if cmd[0] == "" {
		return nil, fmt.Errorf("%w: terminal command: the program name is empty", ErrInvalidInput)
	}
	env := map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
	for k, v := range o.Env {
		env[k] = v
	}
	cwd := o.Cwd
	if cwd == "" {
		cwd = s.spec.WorkingDir
	}
	return startTerminal(ctx, rpc, func(sctx context.Context) (*client.ProcessStream, error) {
		return rpc.StartProcess(sctx, client.StartOptions{Cmd: cmd[0], Args: cmd[1:], Env: env, Cwd: cwd,
			Pty: &client.PtySize{Cols: uint32(o.Cols), Rows: uint32(o.Rows)}, Keepalive: terminalKeepalive})
	})
}

// ConnectTerminal attaches to a terminal of the sandbox by its program's
// pid: its output from now on, input, resize and its end.
func (s *Sandbox) ConnectTerminal(ctx context.Context, pid uint32) (*Terminal, error) {
	rpc, err := s.terminalRPC()
	if err != nil {
		return nil, err
	}
	return startTerminal(ctx, rpc, func(sctx context.Context) (*client.ProcessStream, error) {
		return rpc.ConnectProcess(sctx, pid, terminalKeepalive)
	})
}

// startTerminal opens the stream on a context of its own (its deadline
// would be the program's lifetime on envd), ended early only if ctx ends
// before the stream is there.
func startTerminal(ctx context.Context, rpc *client.Client, open func(context.Context) (*client.ProcessStream, error)) (*Terminal, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	stream, err := open(sctx)
	if !stop() || err != nil {
		cancel()
		if stream != nil {
			stream.Close()
		}
		if err == nil {
			err = fmt.Errorf("terminal: %w", ctx.Err())
		}
		return nil, err
	}
	t := &Terminal{Pid: stream.Pid, rpc: rpc, out: make(chan []byte, terminalQueue), done: make(chan struct{}), cancel: cancel, exitCode: -1}
	go t.pump(sctx, stream)
	return t, nil
}

func (t *Terminal) pump(ctx context.Context, stream *client.ProcessStream) {
	defer close(t.out)
	defer close(t.done)
	defer stream.Close()
	gotEnd := false
	for {
		ev, ok := stream.Next()
		if !ok {
			break
		}
		if ev.End {
			t.mu.Lock()
			t.exitCode, gotEnd = ev.ExitCode, true
			t.mu.Unlock()
			continue
		}
		// A pid connected to that has no pty (a command) sends
		// stdout and stderr: they are its terminal output here.
		var b []byte
		switch {
		case len(ev.Pty) > 0:
			b = ev.Pty
		case len(ev.Stdout) > 0:
			b = ev.Stdout
		case len(ev.Stderr) > 0:
			b = ev.Stderr
		default:
			continue
		}
		select {
		case t.out <- b:
		case <-ctx.Done():
		}
	}
	if gotEnd {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch err := stream.Err(); {
	case ctx.Err() != nil:
		t.exitErr = fmt.Errorf("terminal %d: %w: it was closed before its program ended", t.Pid, ErrClosed)
	case err != nil:
		t.exitErr = fmt.Errorf("terminal %d: %w", t.Pid, err)
	default:
		t.exitErr = fmt.Errorf("terminal %d: %w: the stream ended without the program's exit status", t.Pid, ErrUnavailable)
	}
}

// Read reads the terminal's output: io.EOF once the program ended (or
// Close was called) and everything before was read. One reader at a time.
func (t *Terminal) Read(p []byte) (int, error) {
	if len(t.rest) == 0 {
		b, ok := <-t.out
		if !ok {
			return 0, io.EOF
		}
		t.rest = b
	}
	n := copy(p, t.rest)
	t.rest = t.rest[n:]
	return n, nil
}

// Write types p into the terminal (keys, pasted text, ^C as 0x03), in
// bounded pieces, each within a bounded wait.
func (t *Terminal) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		end := min(len(p), n+terminalInputChunk)
		ctx, cancel := context.WithTimeout(context.Background(), terminalCallWait)
		err := t.rpc.SendPty(ctx, t.Pid, p[n:end])
		cancel()
		if err != nil {
			return n, fmt.Errorf("terminal %d: %w", t.Pid, err)
		}
		n = end
	}
	return n, nil
}

// Resize changes the terminal's size; its program gets SIGWINCH.
func (t *Terminal) Resize(ctx context.Context, cols, rows uint16) error {
	if cols == 0 || rows == 0 {
		return fmt.Errorf("%w: terminal size %dx%d: columns and rows must be at least 1", ErrInvalidInput, cols, rows)
	}
	if err := t.rpc.ResizePty(ctx, t.Pid, client.PtySize{Cols: uint32(cols), Rows: uint32(rows)}); err != nil {
		return fmt.Errorf("terminal %d: %w", t.Pid, err)
	}
	return nil
}

// Kill ends the terminal's program with SIGKILL (its end then reaches Read
// and Wait). A program already gone is not an error.
func (t *Terminal) Kill(ctx context.Context) error {
	err := t.rpc.SignalProcess(ctx, t.Pid, SIGKILL)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("terminal %d: kill: %w", t.Pid, err)
	}
	return nil
}

// Wait waits until the program ends and returns its exit status (-1 when
// a signal ended it). The error says why there is no status: the stream
// broke, or Close was called first. Output not yet read is dropped, so
// that a full queue can't hold Wait: read to io.EOF first to keep it, and
// don't call Wait while another goroutine reads.
func (t *Terminal) Wait(ctx context.Context) (int, error) {
	for {
		select {
		case <-t.done:
			t.mu.Lock()
			defer t.mu.Unlock()
			return t.exitCode, t.exitErr
		case _, ok := <-t.out:
			if !ok {
				<-t.done
				t.mu.Lock()
				defer t.mu.Unlock()
				return t.exitCode, t.exitErr
			}
		case <-ctx.Done():
			return -1, fmt.Errorf("terminal %d: %w", t.Pid, ctx.Err())
		}
	}
}

// Close lets go of the terminal without ending its program.
func (t *Terminal) Close() error {
	t.cancel()
	<-t.done
	return nil
}
