package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sandboxenv"
	"github.com/code-sandboxes/code-sandboxes/internal/secs"
	"github.com/code-sandboxes/code-sandboxes/internal/toolproto"
)

// Tools ("code mode"): the host grants a sandbox a set of tools — functions
// that run on the host — and sandbox code calls them by name. The calls
// travel over the channel the host already uses to reach the agent, so they
// work with network "none" and on every variant that runs this agent:
//
//	sandbox code ──unix socket──▶ agent ──POST /x/tools stream──▶ host
//	sandbox code ◀───────────── agent ◀──POST /x/tools/calls/{id}── host
//
// The host opens POST /x/tools with the granted tools; the response is an
// NDJSON stream of calls (and cancellations) that lasts as long as the host
// serves them. Sandbox code connects to ToolsSocketEnv's unix socket, sends
// one JSON line {"tool": name, "args": {...}} and reads one JSON line back.
// The socket needs no token: it is reachable by the sandbox's own code only,
// which is the party the tools were granted to, and it reaches nothing but
// the granted tools (the agent checks every name and bounds every call).

// ToolsSocketEnv names the environment variable, set for every kernel, that
// holds the path of the tools socket.
const ToolsSocketEnv = sandboxenv.ToolsSocketEnv

// Bounds of tool calls, and tool names: what the host and this agent
// agree on (internal/toolproto, which the host side imports without
// linking the agent).
const (
	MaxToolArgBytes    = toolproto.MaxToolArgBytes
	MaxToolResultBytes = toolproto.MaxToolResultBytes
	MaxToolCalls       = toolproto.MaxToolCalls
	MaxTools           = toolproto.MaxTools
	DefaultToolTimeout = toolproto.DefaultToolTimeout
	// maxToolSpecBytes bounds the registration body.
	maxToolSpecBytes = 4 << 20
	// toolRequestWait bounds how long a connection may take to send its
	// request line.
	toolRequestWait = 10 * time.Second
	// maxToolTrailingBytes bounds what a caller may send after its request
	// line while its call runs (ignored: only a hang-up ends the call).
	maxToolTrailingBytes = 64 << 10
)

var (
	ToolNamePattern = toolproto.ToolNamePattern
	ErrToolName     = toolproto.ErrToolName
)

// CheckToolName says why name can't be a tool's name, or nil.
func CheckToolName(name string) error { return toolproto.CheckToolName(name) }

// ToolSpec is one granted tool as the host registers it and as sandbox code
// lists it.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// Timeout bounds one call, in seconds (0 = DefaultToolTimeout).
	Timeout float64 `json:"timeout,omitempty"`
}

// toolCallLine is what the host's stream carries.
type toolCallLine struct {
	Type string          `json:"type"` // "call", "cancel", "keepalive"
	ID   string          `json:"id,omitempty"`
	Tool string          `json:"tool,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`
}

// toolAnswer is what the host posts for a call, and (with Kind) what the
// sandbox code reads back.
type toolAnswer struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *string         `json:"error,omitempty"`
	// Kind classifies an error for the sandbox: "tool" (the tool failed),
	// "timeout", "refused" (not granted, too large, too many calls),
	// "unavailable" (no host serves the tools).
	Kind string `json:"kind,omitempty"`
	// TimedOut is the host saying the tool ran out of time (its error is
	// then raised as a timeout).
	TimedOut bool `json:"timed_out,omitempty"`
}

type toolStream struct {
	out  chan toolCallLine
	done chan struct{} // closed when the host's request ends
	// replaced is set (under the hub's lock, before done closes) when a new
	// grant took over: the old host still answers the calls it was sent.
	replaced bool
}

type pendingCall struct {
	stream *toolStream
	answer chan toolAnswer // buffered 1
}

type toolHub struct {
	sockPath string

	mu      sync.Mutex
	ln      net.Listener
	specs   map[string]ToolSpec
	stream  *toolStream
	pending map[string]*pendingCall
	active  int // connections being served
	closed  bool
}

func newToolHub(sockPath string) *toolHub {
	return &toolHub{sockPath: sockPath, specs: map[string]ToolSpec{}, pending: map[string]*pendingCall{}}
}

// listen opens the socket on first use.
func (h *toolHub) listenLocked() error {
	if h.ln != nil {
		return nil
	}
	dir := filepath.Dir(h.sockPath)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the tools socket's directory: %w", err)
	}
	_ = os.Remove(h.sockPath)
	ln, err := net.Listen("unix", h.sockPath)
	if err != nil {
		return fmt.Errorf("listening on the tools socket: %w", err)
	}
	h.ln = ln
	go h.accept(ln)
	return nil
}

func (h *toolHub) close() {
	h.mu.Lock()
	h.closed = true
	ln := h.ln
	h.ln = nil
	h.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
		_ = os.RemoveAll(filepath.Dir(h.sockPath))
	}
}

func (h *toolHub) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off instead of spinning.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		h.mu.Lock()
		full := h.active >= MaxToolCalls
		if !full {
			h.active++
		}
		h.mu.Unlock()
		if full {
			go func() {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				writeToolAnswer(c, refusal("refused", fmt.Sprintf("too many tool calls in progress (the limit is %d at once); wait for some to finish", MaxToolCalls)))
				c.Close()
			}()
			continue
		}
		go func() {
			defer func() {
				h.mu.Lock()
				h.active--
				h.mu.Unlock()
			}()
			h.serveConn(c)
		}()
	}
}

func refusal(kind, msg string) toolAnswer { return toolAnswer{Error: &msg, Kind: kind} }

func writeToolAnswer(w io.Writer, a toolAnswer) {
	b, _ := json.Marshal(a)
	_, _ = w.Write(append(b, '\n'))
}

// sandboxRequest is what sandbox code sends on the socket.
type sandboxRequest struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
	List bool            `json:"list"`
}

func (h *toolHub) serveConn(c net.Conn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(toolRequestWait))
	br := bufio.NewReaderSize(c, 64<<10)
	line, err := readLimitedLine(br, MaxToolArgBytes+64<<10)
	if err != nil {
		if errors.Is(err, errLineTooLong) {
			writeToolAnswer(c, refusal("refused", fmt.Sprintf("the arguments are over the limit of %d bytes (as JSON)", MaxToolArgBytes)))
		}
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	// Answers are small or bounded; a reader that never reads must not
	// hold the call's goroutine forever.
	_ = c.SetWriteDeadline(time.Now().Add(24 * time.Hour))
	var req sandboxRequest
	if err := json.Unmarshal(line, &req); err != nil {
		writeToolAnswer(c, refusal("refused", "invalid tool request: "+err.Error()))
		return
	}
	// The line's bound leaves room for the envelope; the arguments
	// themselves have theirs.
	if len(req.Args) > MaxToolArgBytes {
		writeToolAnswer(c, refusal("refused", fmt.Sprintf("the arguments are over the limit of %d bytes (as JSON)", MaxToolArgBytes)))
		return
	}
	if req.List {
		h.mu.Lock()
		specs := h.listLocked()
		h.mu.Unlock()
		b, _ := json.Marshal(map[string]any{"tools": specs})
		_, _ = c.Write(append(b, '\n'))
		return
	}
	a := h.call(c, br, req)
	_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	writeToolAnswer(c, a)
}

func (h *toolHub) listLocked() []ToolSpec {
	out := make([]ToolSpec, 0, len(h.specs))
	for _, s := range h.specs {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (h *toolHub) call(c net.Conn, br *bufio.Reader, req sandboxRequest) toolAnswer {
	h.mu.Lock()
	spec, granted := h.specs[req.Tool]
	if !granted {
		names := make([]string, 0, len(h.specs))
		for n := range h.specs {
			names = append(names, n)
		}
		sort.Strings(names)
		h.mu.Unlock()
		return refusal("refused", fmt.Sprintf("tool %q is not granted to this sandbox (granted: %s)", req.Tool, strings.Join(names, ", ")))
	}
	st := h.stream
	if st == nil || h.closed {
		h.mu.Unlock()
		return refusal("unavailable", fmt.Sprintf("tool %q: no host serves the tools now (the program that granted them has closed or gone away)", req.Tool))
	}
	args := req.Args
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	if args[0] != '{' {
		h.mu.Unlock()
		return refusal("refused", "the arguments must be a JSON object of keyword arguments")
	}
	id := newID()
	p := &pendingCall{stream: st, answer: make(chan toolAnswer, 1)}
	h.pending[id] = p
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.pending, id)
		h.mu.Unlock()
	}()
	// The stream's buffer holds a call and a cancel for every call that
	// may be in progress, so this never blocks.
	select {
	case st.out <- toolCallLine{Type: "call", ID: id, Tool: req.Tool, Args: args}:
	default:
		return refusal("refused", "too many tool calls in progress")
	}
	timeout := DefaultToolTimeout
	if spec.Timeout > 0 {
		timeout = secs.Duration(spec.Timeout)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	// The caller hanging up (its thread interrupted, its process killed)
	// ends the call and tells the host. Bytes it sends meanwhile are not a
	// hang-up: they are read and dropped, up to a bound past which the
	// call is refused (a caller streaming into the socket is not waiting
	// for an answer).
	hangup := make(chan error, 1)
	go func() {
		n, err := io.Copy(io.Discard, io.LimitReader(br, maxToolTrailingBytes+1))
		if err == nil && n > maxToolTrailingBytes {
			err = fmt.Errorf("the caller sent over %d bytes after its request line (send one request per connection)", maxToolTrailingBytes)
		} else {
			err = nil
		}
		hangup <- err
	}()
	cancel := func() {
		select {
		case st.out <- toolCallLine{Type: "cancel", ID: id}:
		default:
		}
	}
	done := st.done
	for {
		select {
		case a := <-p.answer:
			return a
		case <-t.C:
			cancel()
			return refusal("timeout", fmt.Sprintf("tool %q did not answer within %s", req.Tool, timeout))
		case <-done:
			h.mu.Lock()
			replaced := st.replaced
			h.mu.Unlock()
			if replaced {
				// The host granted a new set: it still answers this call
				// (or the timeout does).
				done = nil
				continue
			}
			return refusal("unavailable", fmt.Sprintf("tool %q: the host serving the tools went away during the call", req.Tool))
		case err := <-hangup:
			cancel()
			if err != nil {
				return refusal("refused", err.Error())
			}
			return refusal("refused", "the caller hung up")
		}
	}
}

var errLineTooLong = errors.New("line too long")

func readLimitedLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > max {
			return nil, errLineTooLong
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, err
	}
}

// register replaces the granted tools and makes st the stream calls go to.
func (h *toolHub) register(specs []ToolSpec, st *toolStream) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errors.New("the sandbox is shutting down")
	}
	if err := h.listenLocked(); err != nil {
		return err
	}
	h.specs = map[string]ToolSpec{}
	for _, s := range specs {
		h.specs[s.Name] = s
	}
	if old := h.stream; old != nil && old != st {
		// The old host's calls in progress stay answerable by id; it is
		// told to stop by its stream ending.
		old.replaced = true
		close(old.done)
	}
	h.stream = st
	return nil
}

// unregister ends st; calls sent on it and not answered fail.
func (h *toolHub) unregister(st *toolStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stream == st {
		h.stream = nil
		close(st.done)
	}
}

func checkSpecs(specs []ToolSpec) error {
	if len(specs) > MaxTools {
		return fmt.Errorf("%d tools: the limit is %d per sandbox", len(specs), MaxTools)
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if err := CheckToolName(s.Name); err != nil {
			return err
		}
		if seen[s.Name] {
			return fmt.Errorf("tool %q is given twice", s.Name)
		}
		seen[s.Name] = true
		if s.Timeout < 0 {
			return fmt.Errorf("tool %q: the timeout must be positive (seconds), or 0 for the default", s.Name)
		}
		if len(s.InputSchema) > 0 && string(s.InputSchema) != "null" {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(s.InputSchema, &obj); err != nil {
				return fmt.Errorf("tool %q: input_schema must be a JSON Schema object: %w", s.Name, err)
			}
		}
	}
	return nil
}

// handleTools is POST /x/tools: register the tools and stream their calls.
func (s *Server) handleTools(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tools []ToolSpec `json:"tools"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxToolSpecBytes)).Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, `invalid tools request: `+err.Error()+`; send {"tools": [{"name", "description", "input_schema", "timeout"}]}`)
		return
	}
	if err := checkSpecs(req.Tools); err != nil {
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	st := &toolStream{out: make(chan toolCallLine, 2*MaxToolCalls+2), done: make(chan struct{})}
	if err := s.tools.register(req.Tools, st); err != nil {
		writeJSONError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	defer s.tools.unregister(st)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	// The stream is use of the sandbox only while a call is in progress:
	// a host holding its tools open must not keep an idle sandbox alive.
	s.end()
	defer s.begin()
	enc := json.NewEncoder(w)
	ka := time.NewTicker(keepaliveEvery)
	defer ka.Stop()
	write := func(l toolCallLine) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if enc.Encode(l) != nil {
			return false
		}
		return rc.Flush() == nil
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-st.done:
			return
		case l := <-st.out:
			if !write(l) {
				return
			}
		case <-ka.C:
			if !write(toolCallLine{Type: "keepalive"}) {
				return
			}
		}
	}
}

// handleToolResult is POST /x/tools/calls/{id}: the host's answer to a call.
func (s *Server) handleToolResult(w http.ResponseWriter, r *http.Request) {
	var a toolAnswer
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxToolResultBytes+64<<10))
	if err != nil {
		writeJSONError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the tool's result is over the limit of %d bytes (as JSON)", MaxToolResultBytes))
		return
	}
	if err := json.Unmarshal(body, &a); err != nil || (a.Error == nil && len(a.Result) == 0) {
		writeJSONError(w, http.StatusBadRequest, `send {"result": <JSON>} or {"error": "<message>"}`)
		return
	}
	if len(a.Result) > MaxToolResultBytes {
		writeJSONError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the tool's result is over the limit of %d bytes (as JSON)", MaxToolResultBytes))
		return
	}
	a.Kind = ""
	if a.Error != nil {
		a.Result = nil
		a.Kind = "tool"
		if a.TimedOut {
			a.Kind = "timeout"
		}
	}
	a.TimedOut = false
	s.tools.mu.Lock()
	p := s.tools.pending[r.PathValue("id")]
	s.tools.mu.Unlock()
	if p == nil {
		writeJSONError(w, http.StatusNotFound, "no such call in progress (it timed out or its caller went away)")
		return
	}
	select {
	case p.answer <- a:
		w.WriteHeader(http.StatusNoContent)
	default:
		writeJSONError(w, http.StatusConflict, "the call was already answered")
	}
}
