package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	processpb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/process/processconnect"
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

func (c *Commands) rpc() (processconnect.ProcessClient, error) {
	if !c.s.variant.Capabilities().Commands {
		return nil, fmt.Errorf("commands: %w (%s)", ErrNotSupported, c.s.variant.Name())
	}
	cl, err := c.s.conn()
	if err != nil {
		return nil, err
	}
	return cl.Process(), nil
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
	rpc    processconnect.ProcessClient
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
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}, Envs: o.env}}
	if o.cwd != "" {
		req.Process.Cwd = &o.cwd
	}
	req.Stdin = &o.stdin
	if o.tag != "" {
		req.Tag = &o.tag
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if o.timeout > 0 {
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
	}
	stream, err := rpc.Start(sctx, connect.NewRequest(req))
	if err != nil {
		cancel()
		return nil, client.ConnectError("start command", err)
	}
	if !stream.Receive() {
		cancel()
		err := stream.Err()
		if err == nil {
			err = errors.New("the stream ended before the start event")
		}
		return nil, client.ConnectError("start command", err)
	}
	st := stream.Msg().GetEvent().GetStart()
	if st == nil {
		cancel()
		return nil, fmt.Errorf("start command: %w: expected a start event first", ErrUnavailable)
	}
	h := &CommandHandle{Pid: st.GetPid(), c: c, rpc: rpc, done: make(chan struct{}), cancel: cancel}
	go h.pump(stream, o)
	return h, nil
}

func (h *CommandHandle) pump(stream *connect.ServerStreamForClient[processpb.StartResponse], o cmdOptions) {
	defer close(h.done)
	defer h.cancel()
	defer stream.Close()
	gotEnd := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			h.mu.Lock()
			if b := d.GetStdout(); len(b) > 0 {
				if h.stdout.Len()+len(b) <= maxCommandOutput {
					h.stdout.Write(b)
				} else {
					h.res.Truncated = true
				}
				h.mu.Unlock()
				if o.onStdout != nil {
					o.onStdout(b)
				}
				continue
			}
			if b := d.GetStderr(); len(b) > 0 {
				if h.stderr.Len()+len(b) <= maxCommandOutput {
					h.stderr.Write(b)
				} else {
					h.res.Truncated = true
				}
				h.mu.Unlock()
				if o.onStderr != nil {
					o.onStderr(b)
				}
				continue
			}
			if b := d.GetPty(); len(b) > 0 {
				if h.stdout.Len()+len(b) <= maxCommandOutput {
					h.stdout.Write(b)
				}
				h.mu.Unlock()
				if o.onStdout != nil {
					o.onStdout(b)
				}
				continue
			}
			h.mu.Unlock()
		}
		if e := ev.GetEnd(); e != nil {
			h.mu.Lock()
			h.res.ExitCode = int(e.GetExitCode())
			h.res.Error = e.GetError()
			h.mu.Unlock()
			gotEnd = true
		}
	}
	// Without an end event there is no exit code: -1, never a clean 0.
	if err := stream.Err(); err != nil && !gotEnd {
		h.res.ExitCode = -1
		h.err = client.ConnectError("command", err)
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

func (h *CommandHandle) sel() *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: h.Pid}}
}

// SendStdin writes to the command's stdin (start it with CommandStdin).
func (h *CommandHandle) SendStdin(ctx context.Context, data []byte) error {
	_, err := h.rpc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: h.sel(), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: data}}}))
	return client.ConnectError("send stdin", err)
}

// CloseStdin closes the command's stdin (EOF).
func (h *CommandHandle) CloseStdin(ctx context.Context) error {
	_, err := h.rpc.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: h.sel()}))
	return client.ConnectError("close stdin", err)
}

// Signal sends SIGTERM or SIGKILL.
func (h *CommandHandle) Signal(ctx context.Context, sig processpb.Signal) error {
	_, err := h.rpc.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: h.sel(), Signal: sig}))
	return client.ConnectError("signal", err)
}

// Kill sends SIGKILL to the command.
func (h *CommandHandle) Kill(ctx context.Context) error {
	return h.Signal(ctx, processpb.Signal_SIGNAL_SIGKILL)
}

// ProcessInfo describes a running process.
type ProcessInfo struct {
	Pid  uint32
	Tag  string
	Cmd  string
	Args []string
	Envs map[string]string
	Cwd  string
}

// List lists the processes started through Commands that still run.
func (c *Commands) List(ctx context.Context) ([]ProcessInfo, error) {
	rpc, err := c.rpc()
	if err != nil {
		return nil, err
	}
	resp, err := rpc.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		return nil, client.ConnectError("list processes", err)
	}
	var out []ProcessInfo
	for _, p := range resp.Msg.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, ProcessInfo{Pid: p.GetPid(), Tag: p.GetTag(), Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Envs: cfg.GetEnvs(), Cwd: cfg.GetCwd()})
	}
	return out, nil
}

// KillProcess kills a process by pid; false if there was none.
func (c *Commands) KillProcess(ctx context.Context, pid uint32) (bool, error) {
	rpc, err := c.rpc()
	if err != nil {
		return false, err
	}
	_, err = rpc.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}, Signal: processpb.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return false, nil
	}
	if err != nil {
		return false, client.ConnectError("kill process", err)
	}
	return true, nil
}
