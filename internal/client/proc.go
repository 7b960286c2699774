package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	processpb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// StartOptions describe a process to start through envd.
type StartOptions struct {
	Cmd   string
	Args  []string
	Env   map[string]string
	Cwd   string // "" = the default
	Stdin bool   // keep stdin open for SendStdin
	Tag   string // "" = none
	// Pty, when set, runs the process on a pseudo-terminal of this size:
	// its output arrives as ProcessEvent.Pty, its input through SendPty.
	Pty *PtySize
	// Keepalive asks envd for a keepalive event after this much silence,
	// so an idle stream (a terminal nobody types in) isn't taken for a
	// dead one by a proxy on the way. 0 = envd's default.
	Keepalive time.Duration
}

// PtySize is a terminal's size in character cells.
type PtySize struct{ Cols, Rows uint32 }

// ProcessEvent is one event of a running process: output, or its end.
type ProcessEvent struct {
	Stdout, Stderr, Pty []byte
	End                 bool
	ExitCode            int
	Error               string // e.g. "signal: killed"
}

// ProcessStream is a started (or connected) process's event stream.
type ProcessStream struct {
	Pid    uint32
	stream eventStream
}

// eventStream is what Start and Connect streams have in common: both carry
// a ProcessEvent per message.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
	event() *processpb.ProcessEvent
}

type startStream struct {
	*connect.ServerStreamForClient[processpb.StartResponse]
}

func (s startStream) event() *processpb.ProcessEvent { return s.Msg().GetEvent() }

type connectStream struct {
	*connect.ServerStreamForClient[processpb.ConnectResponse]
}

func (s connectStream) event() *processpb.ProcessEvent { return s.Msg().GetEvent() }

// firstEvent waits for the stream's start event and returns the stream
// with the pid it names.
func firstEvent(op string, stream eventStream) (*ProcessStream, error) {
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		if err == nil {
			err = errors.New("the stream ended before the start event")
		}
		return nil, ConnectError(op, err)
	}
	st := stream.event().GetStart()
	if st == nil {
		stream.Close()
		return nil, fmt.Errorf("%s: %w: expected a start event first", op, sberr.ErrUnavailable)
	}
	return &ProcessStream{Pid: st.GetPid(), stream: stream}, nil
}

func setKeepalive(h http.Header, d time.Duration) {
	if d > 0 {
		h.Set("Keepalive-Ping-Interval", strconv.Itoa(max(1, int(d/time.Second))))
	}
}

// StartProcess starts a process and returns once envd says it runs (its
// start event). ctx bounds the whole stream: its deadline is the
// process's lifetime, as envd's Connect-Timeout-Ms.
func (c *Client) StartProcess(ctx context.Context, o StartOptions) (*ProcessStream, error) {
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: o.Cmd, Args: o.Args, Envs: o.Env}}
	if o.Cwd != "" {
		req.Process.Cwd = &o.Cwd
	}
	req.Stdin = &o.Stdin
	if o.Tag != "" {
		req.Tag = &o.Tag
	}
	if o.Pty != nil {
		req.Pty = &processpb.PTY{Size: &processpb.PTY_Size{Cols: o.Pty.Cols, Rows: o.Pty.Rows}}
	}
	creq := connect.NewRequest(req)
	setKeepalive(creq.Header(), o.Keepalive)
	stream, err := c.Process().Start(ctx, creq)
	if err != nil {
		return nil, ConnectError("start command", err)
	}
	return firstEvent("start command", startStream{stream})
}

// ConnectProcess attaches to a running process by pid: its output from now
// on, and its end. ctx bounds the stream only (the process goes on when it
// ends); keepalive as in StartOptions.
func (c *Client) ConnectProcess(ctx context.Context, pid uint32, keepalive time.Duration) (*ProcessStream, error) {
	creq := connect.NewRequest(&processpb.ConnectRequest{Process: pidSelector(pid)})
	setKeepalive(creq.Header(), keepalive)
	stream, err := c.Process().Connect(ctx, creq)
	if err != nil {
		return nil, ConnectError("connect to process", err)
	}
	return firstEvent("connect to process", connectStream{stream})
}

// Next waits for the next event; false when the stream has ended (see Err).
// Keepalives are skipped.
func (p *ProcessStream) Next() (ProcessEvent, bool) {
	for p.stream.Receive() {
		ev := p.stream.event()
		if d := ev.GetData(); d != nil {
			if b := d.GetStdout(); len(b) > 0 {
				return ProcessEvent{Stdout: b}, true
			}
			if b := d.GetStderr(); len(b) > 0 {
				return ProcessEvent{Stderr: b}, true
			}
			if b := d.GetPty(); len(b) > 0 {
				return ProcessEvent{Pty: b}, true
			}
			continue
		}
		if e := ev.GetEnd(); e != nil {
			return ProcessEvent{End: true, ExitCode: int(e.GetExitCode()), Error: e.GetError()}, true
		}
	}
	return ProcessEvent{}, false
}

// Err is why the stream ended (nil after a clean end).
func (p *ProcessStream) Err() error { return ConnectError("command", p.stream.Err()) }

// Close drops the stream (the process goes on unless its context ended).
func (p *ProcessStream) Close() error { return p.stream.Close() }

func pidSelector(pid uint32) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
}

// SendStdin writes to a process's stdin.
func (c *Client) SendStdin(ctx context.Context, pid uint32, data []byte) error {
	_, err := c.Process().SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: pidSelector(pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: data}}}))
	return ConnectError("send stdin", err)
}

// SendPty writes to a process's terminal (a process started with a Pty).
func (c *Client) SendPty(ctx context.Context, pid uint32, data []byte) error {
	_, err := c.Process().SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: pidSelector(pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: data}}}))
	return ConnectError("send terminal input", err)
}

// ResizePty changes the size of a process's terminal; the process gets
// SIGWINCH.
func (c *Client) ResizePty(ctx context.Context, pid uint32, size PtySize) error {
	_, err := c.Process().Update(ctx, connect.NewRequest(&processpb.UpdateRequest{Process: pidSelector(pid), Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: size.Cols, Rows: size.Rows}}}))
	return ConnectError("resize terminal", err)
}

// CloseStdin closes a process's stdin (EOF).
func (c *Client) CloseStdin(ctx context.Context, pid uint32) error {
	_, err := c.Process().CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: pidSelector(pid)}))
	return ConnectError("close stdin", err)
}

// Signal is a signal envd delivers: SIGTERM or SIGKILL.
type Signal int32

// The signals envd knows.
const (
	SIGTERM = Signal(processpb.Signal_SIGNAL_SIGTERM)
	SIGKILL = Signal(processpb.Signal_SIGNAL_SIGKILL)
)

// SignalProcess sends sig to a process; ErrNotFound if there is none.
func (c *Client) SignalProcess(ctx context.Context, pid uint32, sig Signal) error {
	_, err := c.Process().SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: pidSelector(pid), Signal: processpb.Signal(sig)}))
	return ConnectError("signal", err)
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

// ListProcesses lists the processes started through envd that still run.
func (c *Client) ListProcesses(ctx context.Context) ([]ProcessInfo, error) {
	resp, err := c.Process().List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		return nil, ConnectError("list processes", err)
	}
	var out []ProcessInfo
	for _, p := range resp.Msg.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, ProcessInfo{Pid: p.GetPid(), Tag: p.GetTag(), Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Envs: cfg.GetEnvs(), Cwd: cfg.GetCwd()})
	}
	return out, nil
}
