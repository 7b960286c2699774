package sandboxes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/toolproto"
)

// ToolFunc runs a tool on the host. args is the JSON object of the keyword
// arguments the sandbox code passed, already checked against the tool's
// schema; the result is marshalled to JSON and decoded in the sandbox; an
// error's message is raised there as tools.ToolError. ctx ends when the call
// times out, its caller in the sandbox goes away, or the sandbox is closed.
type ToolFunc func(ctx context.Context, args json.RawMessage) (any, error)

// Tool is a host function granted to a sandbox: its code calls it as
// tools.<Name>(**kwargs) in Python (import tools).
type Tool struct {
	// Name is the Python function's name: an identifier that starts with a
	// letter, at most 64 characters, not a keyword.
	Name string
	// Description becomes the function's docstring.
	Description string
	// InputSchema is the JSON Schema of the keyword arguments, an object
	// schema ({"type": "object", "properties": …, "required": […]}); nil
	// = any keyword arguments. It is checked in the sandbox (a clear
	// TypeError before the call leaves) and again on the host, since
	// sandbox code can bypass the first check.
	InputSchema json.RawMessage
	// Func runs the call.
	Func ToolFunc
	// Timeout bounds one call (0 = DefaultToolTimeout): past it the sandbox
	// code gets tools.ToolTimeout (a TimeoutError) and ctx is cancelled.
	Timeout time.Duration
}

// DefaultToolTimeout bounds one tool call when Tool.Timeout is 0.
const DefaultToolTimeout = toolproto.DefaultToolTimeout

// Bounds on tool calls, enforced by the agent in the sandbox.
const (
	MaxToolArgBytes    = toolproto.MaxToolArgBytes    // one call's arguments, as JSON
	MaxToolResultBytes = toolproto.MaxToolResultBytes // one call's result, as JSON
	MaxToolCalls       = toolproto.MaxToolCalls       // calls in progress at once; more are refused
	MaxTools           = toolproto.MaxTools           // tools per sandbox
)

// NewTool builds a Tool from a typed function: the input schema is inferred
// from In (a struct; its json tags name the arguments, fields without
// omitempty/omitzero are required, a jsonschema tag describes one), and the
// arguments are decoded into In.
func NewTool[In, Out any](name, description string, fn func(ctx context.Context, in In) (Out, error)) (Tool, error) {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		return Tool{}, fmt.Errorf("%w: tool %q: inferring the input schema: %w", ErrInvalidInput, name, err)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return Tool{}, fmt.Errorf("%w: tool %q: %w", ErrInvalidInput, name, err)
	}
	return Tool{Name: name, Description: description, InputSchema: raw, Func: func(ctx context.Context, args json.RawMessage) (any, error) {
		var in In
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, fmt.Errorf("invalid arguments: %w", err)
		}
		return fn(ctx, in)
	}}, nil
}

// preparedTool is a Tool with its schema resolved for validation.
type preparedTool struct {
	Tool
	schema *jsonschema.Resolved
}

func prepareTool(t Tool) (preparedTool, error) {
	if err := toolproto.CheckToolName(t.Name); err != nil {
		return preparedTool{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if t.Func == nil {
		return preparedTool{}, fmt.Errorf("%w: tool %q has no Func", ErrInvalidInput, t.Name)
	}
	if t.Timeout < 0 {
		return preparedTool{}, fmt.Errorf("%w: tool %q: Timeout %s: give a positive duration, or 0 for DefaultToolTimeout", ErrInvalidInput, t.Name, t.Timeout)
	}
	p := preparedTool{Tool: t}
	if len(t.InputSchema) > 0 && string(t.InputSchema) != "null" {
		var s jsonschema.Schema
		if err := json.Unmarshal(t.InputSchema, &s); err != nil {
			return preparedTool{}, fmt.Errorf("%w: tool %q: InputSchema is not a JSON Schema: %w", ErrInvalidInput, t.Name, err)
		}
		if s.Type != "" && s.Type != "object" {
			return preparedTool{}, fmt.Errorf("%w: tool %q: InputSchema must describe an object (the keyword arguments), not %q", ErrInvalidInput, t.Name, s.Type)
		}
		rs, err := s.Resolve(nil)
		if err != nil {
			return preparedTool{}, fmt.Errorf("%w: tool %q: InputSchema: %w", ErrInvalidInput, t.Name, err)
		}
		p.schema = rs
	}
	return p, nil
}

// toolSet is a sandbox's granted tools and the stream that serves them.
type toolSet struct {
	byName map[string]preparedTool
	stream *client.ToolStream
	done   chan struct{} // closed when the current stream's Serve returns
}

// RegisterTool grants the sandbox one more tool (replacing one of the same
// name). It returns once sandbox code can call it.
func (s *Sandbox) RegisterTool(ctx context.Context, name, description string, inputSchema json.RawMessage, fn ToolFunc) error {
	return s.RegisterTools(ctx, Tool{Name: name, Description: description, InputSchema: inputSchema, Func: fn})
}

// RegisterTools grants the sandbox the tools (replacing any of the same
// names); see Tool. The calls travel over the channel the host already uses
// to reach the sandbox's agent, so they work with network "none". Variants
// whose sandboxes don't run our agent (e2b) refuse with ErrNotSupported.
func (s *Sandbox) RegisterTools(ctx context.Context, tools ...Tool) error {
	prepared := make([]preparedTool, 0, len(tools))
	for _, t := range tools {
		p, err := prepareTool(t)
		if err != nil {
			return err
		}
		prepared = append(prepared, p)
	}
	s.toolsMu.Lock()
	defer s.toolsMu.Unlock()
	c, err := s.conn()
	if err != nil {
		return err
	}
	byName := map[string]preparedTool{}
	for n, t := range s.tools.byName {
		byName[n] = t
	}
	for _, p := range prepared {
		byName[p.Name] = p
	}
	if len(byName) > MaxTools {
		return fmt.Errorf("%w: %d tools: the limit is %d per sandbox", ErrInvalidInput, len(byName), MaxTools)
	}
	specs := make([]client.ToolSpec, 0, len(byName))
	for _, t := range byName {
		specs = append(specs, client.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, Timeout: t.Timeout.Seconds()})
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	// The stream lives as long as the sandbox handle, not as the caller's ctx;
	// ctx bounds only the grant itself.
	life, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	old := s.tools.stream
	if old != nil {
		// The agent ends the old stream as soon as it takes the new grant;
		// the calls the old one is running must still be answered.
		old.KeepCalls(true)
	}
	st, err := c.OpenTools(life, specs)
	if err != nil && old != nil {
		old.KeepCalls(false)
	}
	if !stop() {
		// ctx ended while granting.
		if err == nil {
			_ = st.Close()
		}
		cancel()
		if err == nil {
			err = ctx.Err()
		}
		return fmt.Errorf("grant tools to sandbox %s: %w", s.ID(), err)
	}
	if err != nil {
		cancel()
		return fmt.Errorf("grant tools to sandbox %s: %w", s.ID(), err)
	}
	if s.tools.stream != nil {
		// Calls the old stream is running still finish and are answered.
		_ = s.tools.stream.Retire()
	}
	done := make(chan struct{})
	s.tools = toolSet{byName: byName, stream: st, done: done}
	go func() {
		defer close(done)
		defer cancel()
		_ = st.Serve(func(ctx context.Context, call client.ToolCall) (json.RawMessage, error) {
			return runTool(ctx, byName, call)
		})
	}()
	return nil
}

// Tools lists the names of the tools granted to the sandbox by this handle.
func (s *Sandbox) Tools() []string {
	s.toolsMu.Lock()
	defer s.toolsMu.Unlock()
	out := make([]string, 0, len(s.tools.byName))
	for n := range s.tools.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// closeTools ends the tool stream: calls in progress fail in the sandbox and
// their ctx is cancelled; new calls fail at once.
func (s *Sandbox) closeTools() {
	s.toolsMu.Lock()
	st, done := s.tools.stream, s.tools.done
	s.tools.stream = nil
	s.toolsMu.Unlock()
	if st != nil {
		_ = st.Close()
		<-done
	}
}

// errToolNotGranted is a call to a name this handle never granted: the
// agent refuses those first, so it means a confused or hostile agent.
var errToolNotGranted = errors.New("tool not granted")

func runTool(ctx context.Context, byName map[string]preparedTool, call client.ToolCall) (json.RawMessage, error) {
	t, ok := byName[call.Tool]
	if !ok {
		return nil, fmt.Errorf("%w: %q", errToolNotGranted, call.Tool)
	}
	if len(call.Args) > MaxToolArgBytes {
		return nil, fmt.Errorf("the arguments are over the limit of %d bytes", MaxToolArgBytes)
	}
	var args any
	err := json.Unmarshal(call.Args, &args)
	if err != nil {
		return nil, fmt.Errorf("invalid arguments: %w", err)
	}
	if _, isObj := args.(map[string]any); !isObj {
		return nil, errors.New("invalid arguments: not a JSON object of keyword arguments")
	}
	if t.schema != nil {
		if err := t.schema.Validate(args); err != nil {
			return nil, fmt.Errorf("invalid arguments: %w", err)
		}
	}
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultToolTimeout
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type out struct {
		res any
		err error
	}
	ch := make(chan out, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- out{err: fmt.Errorf("the tool panicked: %v", r)}
			}
		}()
		res, err := t.Func(tctx, call.Args)
		ch <- out{res, err}
	}()
	var res any
	select {
	case o := <-ch:
		res, err = o.res, o.err
	case <-tctx.Done():
		// A Func that ignores ctx can't be stopped; its goroutine ends
		// when it returns, and the sandbox gets its answer now.
		err = tctx.Err()
	}
	if err != nil {
		if ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: tool %q did not answer within %s", client.ErrToolTimeout, t.Name, timeout)
		}
		return nil, err
	}
	if raw, ok := res.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return nil, errors.New("the tool returned invalid JSON")
		}
		return raw, nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("the tool's result can't be sent as JSON: %w", err)
	}
	return b, nil
}
