package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
)

// maxCommandOutput bounds what Run accumulates per stream; past it output is
// dropped and CommandResult.Truncated set (callbacks still see everything).
const maxCommandOutput = 64 << 20

// Commands runs shell commands in the sandbox (E2B's envd process service).
type Commands struct{ s *Sandbox }

// Commands returns the sandbox's command runner.
func (s *Sandbox) Commands() *Commands { return &Commands{s: s} }

// CommandResult is the outcome of a finished command.
type CommandResult struct {
	ExitCode  int
	Stdout    string
	Stderr    string
	Error     string // e.g. "exit status 1", or "signal: killed"
	Truncated bool
}

// CommandOption configures Run and Start.
type CommandOption func(*cmdOptions)

type cmdOptions struct {
	env      map[string]string
	cwd      string
	timeout  time.Duration
	stdin    bool
	tag      string
	onStdout func([]byte)
	onStderr func([]byte)
}

// CommandEnv sets environment variables for the command.
func CommandEnv(env map[string]string) CommandOption { return func(o *cmdOptions) { o.env = env } }

// CommandCwd sets the command's working directory.
func CommandCwd(dir string) CommandOption { return func(o *cmdOptions) { o.cwd = dir } }

// CommandTimeout bounds the command's life: it is killed when it runs out.
func CommandTimeout(d time.Duration) CommandOption { return func(o *cmdOptions) { o.timeout = d } }

// CommandStdin keeps the command's stdin open for SendStdin.
func CommandStdin() CommandOption { return func(o *cmdOptions) { o.stdin = true } }

// CommandTag names the process so it can be found with List.
func CommandTag(tag string) CommandOption { return func(o *cmdOptions) { o.tag = tag } }

// OnCommandStdout is called live with every stdout chunk.
func OnCommandStdout(f func([]byte)) CommandOption { return func(o *cmdOptions) { o.onStdout = f } }

// OnCommandStderr is called live with every stderr chunk.
func OnCommandStderr(f func([]byte)) CommandOption { return func(o *cmdOptions) { o.onStderr = f } }

func (c *Commands) rpc() (*client.Client, error) {
	if !c.s.variant.Capabilities().Commands {
		return nil, fmt.Errorf("commands: %w (%s)", ErrNotSupported, c.s.variant.Name())
	}
	return c.s.conn()
}

// Run runs cmd with /bin/bash -l -c and waits for it. A non-zero exit is not
// a Go error: look at ExitCode. When ctx ends first the command is killed
// and Run returns what it had so far (ExitCode -1) with ctx's error; when
// CommandTimeout runs out, the error is ErrTimeout.
func (c *Commands) Run(ctx context.Context, cmd string, opts ...CommandOption) (*CommandResult, error) {
	h, err := c.Start(ctx, cmd, opts...)
	if err != nil {
		return nil, err
	}
	select {
	case <-h.done:
		return h.Wait()
	case <-ctx.Done():
	}
	// The stream outlives ctx on purpose (Start's handle is for later), so
	// Run ends the command itself: kill it, bounded, then drop the stream.
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandKillWait)
	_ = h.Kill(kctx)
	cancel()
	h.cancel()
	<-h.done
	r, _ := h.Wait()
	r.ExitCode = -1
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return r, fmt.Errorf("command: %w: %w", ErrTimeout, ctx.Err())
	}
	return r, fmt.Errorf("command: %w", ctx.Err())
}

// commandKillWait bounds the kill Run sends when its context ends, so a
// sandbox that no longer answers can't hold the caller.
const commandKillWait = 5 * time.Second

// CommandHandle is a running command.
type CommandHandle struct {
	Pid    uint32
	c      *Commands
	rpc    *client.Client
	done   chan struct{}
	res    CommandResult
	err    error
	mu     sync.Mutex
	stdout strings.Builder
	stderr strings.Builder
	cancel context.CancelFunc
}

// Start starts cmd and returns once it runs; its output streams to the
// callbacks and is collected for Wait.
func (c *Commands) Start(ctx context.Context, cmd string, opts ...CommandOption) (*CommandHandle, error) {
	rpc, err := c.rpc()
	if err != nil {
		return nil, err
	}
	o := cmdOptions{}
	for _, f := range opts {
		f(&o)
	}
	if o.cwd == "" {
		o.cwd = c.s.spec.WorkingDir
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if o.timeout > 0 {
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
	}
	stream, err := rpc.StartProcess(sctx, client.StartOptions{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd},
		Env: o.env, Cwd: o.cwd, Stdin: o.stdin, Tag: o.tag})
	if err != nil {
		cancel()
		return nil, err
	}
	h := &CommandHandle{Pid: stream.Pid, c: c, rpc: rpc, done: make(chan struct{}), cancel: cancel}
	go h.pump(stream, o)
	return h, nil
}

func (h *CommandHandle) pump(stream *client.ProcessStream, o cmdOptions) {
	defer close(h.done)
	defer h.cancel()
	defer stream.Close()
	keep := func(b *strings.Builder, p []byte) {
		if b.Len()+len(p) <= maxCommandOutput {
			b.Write(p)
		} else {
			h.res.Truncated = true
		}
	}
	gotEnd := false
	for {
		ev, ok := stream.Next()
		if !ok {
			break
		}
		h.mu.Lock()
		switch {
		case ev.End:
			h.res.ExitCode, h.res.Error = ev.ExitCode, ev.Error
			gotEnd = true
		case len(ev.Stdout) > 0:
			keep(&h.stdout, ev.Stdout)
		case len(ev.Stderr) > 0:
			keep(&h.stderr, ev.Stderr)
		case len(ev.Pty) > 0:
			keep(&h.stdout, ev.Pty)
		}
		h.mu.Unlock()
		switch {
		case len(ev.Stdout) > 0 && o.onStdout != nil:
			o.onStdout(ev.Stdout)
		case len(ev.Pty) > 0 && o.onStdout != nil:
			o.onStdout(ev.Pty)
		case len(ev.Stderr) > 0 && o.onStderr != nil:
			o.onStderr(ev.Stderr)
		}
	}
	// Without an end event there is no exit code: -1, never a clean 0.
	if err := stream.Err(); err != nil && !gotEnd {
		h.res.ExitCode = -1
		h.err = err
	} else if !gotEnd {
		h.res.ExitCode = -1
		h.err = fmt.Errorf("command: %w: the process stream ended without a result", ErrUnavailable)
	}
}

// Wait waits for the command to finish.
func (h *CommandHandle) Wait() (*CommandResult, error) {
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.res
	r.Stdout, r.Stderr = h.stdout.String(), h.stderr.String()
	return &r, h.err
}

// SendStdin writes to the command's stdin (start it with CommandStdin).
func (h *CommandHandle) SendStdin(ctx context.Context, data []byte) error {
	return h.rpc.SendStdin(ctx, h.Pid, data)
}

// CloseStdin closes the command's stdin (EOF).
func (h *CommandHandle) CloseStdin(ctx context.Context) error {
	return h.rpc.CloseStdin(ctx, h.Pid)
}

// Signal is what Signal sends: SIGTERM or SIGKILL (what envd delivers).
type Signal = client.Signal

// The signals a command can be sent.
const (
	SIGTERM = client.SIGTERM
	SIGKILL = client.SIGKILL
)

// Signal sends SIGTERM or SIGKILL.
func (h *CommandHandle) Signal(ctx context.Context, sig Signal) error {
	return h.rpc.SignalProcess(ctx, h.Pid, sig)
}

// Kill sends SIGKILL to the command.
func (h *CommandHandle) Kill(ctx context.Context) error {
	return h.Signal(ctx, SIGKILL)
}

// ProcessInfo describes a running process.
type ProcessInfo = client.ProcessInfo

// List lists the processes started through Commands that still run.
func (c *Commands) List(ctx context.Context) ([]ProcessInfo, error) {
	rpc, err := c.rpc()
	if err != nil {
		return nil, err
	}
	return rpc.ListProcesses(ctx)
}

// KillProcess kills a process by pid; false if there was none.
func (c *Commands) KillProcess(ctx context.Context, pid uint32) (bool, error) {
	rpc, err := c.rpc()
	if err != nil {
		return false, err
	}
	err = rpc.SignalProcess(ctx, pid, SIGKILL)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kill process: %w", err)
	}
	return true, nil
}
