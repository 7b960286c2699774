package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// ToolSpec is one tool granted to a sandbox (POST /x/tools, see
// docs/agent-protocol.md).
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Timeout     float64         `json:"timeout,omitempty"` // seconds; 0 = the agent's default
}

// ToolCall is one call from sandbox code.
type ToolCall struct {
	ID   string
	Tool string
	Args json.RawMessage
}

// ToolHandler runs a call on the host: the JSON result, or an error whose
// message the sandbox code sees. ctx ends when the call times out or its
// caller in the sandbox goes away.
type ToolHandler func(ctx context.Context, call ToolCall) (json.RawMessage, error)

// ErrToolTimeout marks a handler's error as the tool running out of time:
// the sandbox code gets a timeout (tools.ToolTimeout), not a tool failure.
var ErrToolTimeout = errors.New("tool timed out")

// MaxToolResultBytes mirrors the agent's bound on one result.
const MaxToolResultBytes = 4 << 20

// maxToolLine bounds one line of the call stream: a call's arguments are
// bounded by the agent (1 MiB), plus the envelope.
const maxToolLine = (1 << 20) + (64 << 10)

// ToolStream is an open registration: calls arrive on it until it is closed.
type ToolStream struct {
	c      *Client
	body   io.ReadCloser
	cancel context.CancelFunc // ends the stream
	ctx    context.Context
	// callCtx is the parent of the calls' contexts: Close cancels it,
	// Retire doesn't (calls in progress finish and are answered).
	callCtx    context.Context
	cancelCall context.CancelFunc
	retired    atomic.Bool
}

// maxHostCalls bounds the calls the host runs at once for one stream: the
// agent sends at most its own bound (64), and a stream that sends more (a
// hostile agent) waits, rather than growing goroutines on the host.
const maxHostCalls = 64

// OpenTools grants the tools to the sandbox and returns once the agent has
// them: sandbox code can call them from then on, and Serve answers the calls.
// A new OpenTools replaces the previous grant (and ends its stream).
func (c *Client) OpenTools(ctx context.Context, specs []ToolSpec) (*ToolStream, error) {
	if specs == nil {
		specs = []ToolSpec{}
	}
	b, err := json.Marshal(map[string]any{"tools": specs})
	if err != nil {
		return nil, fmt.Errorf("grant tools: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	resp, err := c.do(sctx, "grant tools", http.MethodPost, c.o.InterpreterURL+"/x/tools", c.interpHeaders(), bytes.NewReader(b), "application/json")
	if err != nil {
		cancel()
		var se *StatusError
		if errors.As(err, &se) && (se.Status == http.StatusNotFound || se.Status == http.StatusMethodNotAllowed) {
			return nil, fmt.Errorf("grant tools: %w: this sandbox's agent has no tools endpoint (tools need a sandbox that runs our agent: local, docker, kubernetes, or one created through serve)", sberr.ErrNotSupported)
		}
		return nil, err
	}
	callCtx, cancelCall := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancelCall)
	return &ToolStream{c: c, body: resp.Body, cancel: cancel, ctx: sctx, callCtx: callCtx,
		cancelCall: func() { stop(); cancelCall() }}, nil
}

// Close ends the stream: calls in progress are cancelled and fail in the
// sandbox, and new calls fail at once.
func (t *ToolStream) Close() error {
	t.cancelCall()
	t.cancel()
	return t.body.Close()
}

// Retire ends the stream after a new grant replaced it: no new calls come,
// and those in progress still run and are answered.
func (t *ToolStream) Retire() error {
	t.retired.Store(true)
	t.cancel()
	return t.body.Close()
}

// KeepCalls says whether calls in progress survive the stream's end: set it
// before a new grant, which ends this stream on the agent's side before the
// new grant's answer arrives (and clear it again if that grant fails).
func (t *ToolStream) KeepCalls(keep bool) { t.retired.Store(keep) }

// Serve answers calls with h until the stream ends (the sandbox is gone,
// Close, or ctx of OpenTools), each call in its own goroutine; the agent
// bounds how many are in progress at once. It waits for the calls it
// started to return before returning.
func (t *ToolStream) Serve(h ToolHandler) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer t.cancelCallIfClosed()
	slots := make(chan struct{}, maxHostCalls)
	var mu sync.Mutex
	cancels := map[string]context.CancelFunc{}
	br := bufio.NewReaderSize(t.body, 64<<10)
	for {
		line, err := readBoundedLine(br, maxToolLine)
		if len(bytes.TrimSpace(line)) > 0 {
			var l struct {
				Type string          `json:"type"`
				ID   string          `json:"id"`
				Tool string          `json:"tool"`
				Args json.RawMessage `json:"args"`
			}
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				return fmt.Errorf("tools stream: %w: %w", ErrProtocol, jerr)
			}
			switch l.Type {
			case "call":
				select {
				case slots <- struct{}{}:
				case <-t.ctx.Done():
					return nil
				}
				cctx, cancel := context.WithCancel(t.callCtx)
				mu.Lock()
				cancels[l.ID] = cancel
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					defer func() {
						mu.Lock()
						delete(cancels, l.ID)
						mu.Unlock()
						cancel()
					}()
					t.answer(cctx, l.ID, h, ToolCall{ID: l.ID, Tool: l.Tool, Args: l.Args})
				}()
			case "cancel":
				mu.Lock()
				if c := cancels[l.ID]; c != nil {
					c()
				}
				mu.Unlock()
			}
		}
		if err != nil {
			if t.ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("tools stream: %w: the sandbox ended the stream (it was replaced by a new grant, or the sandbox stopped)", sberr.ErrUnavailable)
			}
			return fmt.Errorf("tools stream: %w", err)
		}
	}
}

// cancelCallIfClosed: when Serve returns because the stream broke (not
// Retire), nobody will answer the calls in progress: they are cancelled.
func (t *ToolStream) cancelCallIfClosed() {
	if !t.retired.Load() {
		t.cancelCall()
	}
}

func (t *ToolStream) answer(ctx context.Context, id string, h ToolHandler, call ToolCall) {
	var body any
	res, err := runHandler(ctx, h, call)
	switch {
	case err != nil:
		body = map[string]any{"error": err.Error(), "timed_out": errors.Is(err, ErrToolTimeout)}
	case len(res) > MaxToolResultBytes:
		body = map[string]string{"error": fmt.Sprintf("the tool's result is %d bytes as JSON, over the limit of %d", len(res), MaxToolResultBytes)}
	default:
		if len(res) == 0 {
			res = json.RawMessage("null")
		}
		body = map[string]json.RawMessage{"result": res}
	}
	if ctx.Err() != nil {
		return // timed out or the caller went away: nobody waits for it
	}
	// A post that fails means the call ended meanwhile; nothing to do.
	_ = t.c.jsonCall(ctx, "answer tool call", http.MethodPost, t.c.o.InterpreterURL, "/x/tools/calls/"+url.PathEscape(id), t.c.interpHeaders(), body, nil)
}

// runHandler runs h, returning at ctx's end even when h ignores ctx (its
// goroutine then finishes on its own: Go can't stop it).
func runHandler(ctx context.Context, h ToolHandler, call ToolCall) (json.RawMessage, error) {
	type out struct {
		res json.RawMessage
		err error
	}
	ch := make(chan out, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- out{err: fmt.Errorf("the tool panicked: %v", r)}
			}
		}()
		res, err := h(ctx, call)
		ch <- out{res, err}
	}()
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
