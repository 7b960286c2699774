// Package client is the Go client of the sandbox data-plane protocol: E2B's
// envd (Connect RPC and /files) and code-interpreter (/execute, /contexts)
// APIs, plus our agent's /x/ extensions. Every variant uses it: local, docker
// and kubernetes dial our agent; e2b dials E2B's own servers.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Options configure a Client.
type Options struct {
	// EnvdURL is the base URL of envd (Connect RPC, /files, /health).
	EnvdURL string
	// InterpreterURL is the base URL of /execute and /contexts; defaults to EnvdURL
	// (our agent serves both on one listener).
	InterpreterURL string
	// HTTPClient carries the requests; nil = a client with sane timeouts.
	HTTPClient *http.Client
	// AccessToken is sent as X-Access-Token.
	AccessToken string
	// EnvdHeaders and InterpreterHeaders are added to every request of each
	// surface (E2B's routing headers, traffic tokens).
	EnvdHeaders, InterpreterHeaders http.Header
	// User, when set, is sent as Basic auth to envd (the user that owns files
	// and runs processes).
	User string
	// MaxLineBytes bounds one NDJSON line (default 64 MiB).
	MaxLineBytes int
	// HeaderTimeout bounds the wait for a response's headers once the
	// request is sent (default DefaultHeaderTimeout); StallTimeout bounds
	// each wait for more bytes of a response body (default
	// DefaultStallTimeout). A hostile or wedged sandbox can't hang a call
	// past them, whatever the caller's context.
	HeaderTimeout, StallTimeout time.Duration
	// Dial, when set, opens a connection to the agent (the same one
	// HTTPClient reaches): Execute then runs over the agent's lean
	// execution connection (execconn.go), not /execute.
	Dial func(ctx context.Context) (net.Conn, error)
}

// Defaults of Options.HeaderTimeout and StallTimeout. An execution stream
// carries a keepalive every 5 s of silence, a download streams: two minutes
// without a byte is a sandbox that stopped answering.
const (
	DefaultHeaderTimeout = 2 * time.Minute
	DefaultStallTimeout  = 2 * time.Minute
)

// Transport timeouts of the clients this package builds (UnixHTTPClient,
// New's default), which also bound the Connect RPCs that bypass do.
const (
	dialTimeout = 10 * time.Second
	idleTimeout = 90 * time.Second
)

// Client talks to one sandbox.
type Client struct {
	o    Options
	hc   *http.Client
	exec execConns
}

// New returns a client.
func New(o Options) *Client {
	if o.InterpreterURL == "" {
		o.InterpreterURL = o.EnvdURL
	}
	o.EnvdURL = strings.TrimRight(o.EnvdURL, "/")
	o.InterpreterURL = strings.TrimRight(o.InterpreterURL, "/")
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = 64 << 20
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	hc := o.HTTPClient
	if hc == nil {
		d := net.Dialer{Timeout: dialTimeout}
		hc = &http.Client{Transport: &http.Transport{DialContext: d.DialContext, TLSHandshakeTimeout: dialTimeout,
			ResponseHeaderTimeout: DefaultHeaderTimeout, MaxIdleConnsPerHost: 16, IdleConnTimeout: idleTimeout}}
	}
	return &Client{o: o, hc: hc}
}

// UnixHTTPClient returns an HTTP client whose every connection goes to the unix
// socket at path; use it with EnvdURL "http://sandbox".
func UnixHTTPClient(path string) *http.Client {
	dial := UnixDial(path)
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx)
		},
		ResponseHeaderTimeout: DefaultHeaderTimeout,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       idleTimeout,
		// Over a local socket compression is only CPU: without this the
		// transport asks for gzip and the agent compresses every download
		// (a 2 GiB read ran at 392 MB/s, gzip on both ends). A request that
		// names an Accept-Encoding itself (an SDK's, through serve) still
		// gets what it asked for.
		DisableCompression: true,
	}}
}

// UnixDial returns a dialer of the unix socket at path (for Options.Dial).
func UnixDial(path string) func(context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }
}

// HTTPClient is the client used for every request (for Connect RPC clients).
func (c *Client) HTTPClient() *http.Client { return c.hc }

// AccessToken is the envd access token the client sends ("" = none).
func (c *Client) AccessToken() string { return c.o.AccessToken }

// EnvdURL is the envd base URL.
func (c *Client) EnvdURL() string { return c.o.EnvdURL }

// EnvdHeaders returns the headers every envd request carries (token, routing, user).
func (c *Client) EnvdHeaders() http.Header {
	h := http.Header{}
	for k, v := range c.o.EnvdHeaders {
		h[k] = v
	}
	if c.o.AccessToken != "" {
		h.Set("X-Access-Token", c.o.AccessToken)
	}
	if c.o.User != "" {
		h.Set("Authorization", "Basic "+basicUser(c.o.User))
	}
	return h
}

func basicUser(u string) string {
	return base64.StdEncoding.EncodeToString([]byte(u + ":"))
}

// StatusError is a non-2xx answer.
type StatusError struct {
	Op      string
	Status  int
	Message string
	kind    error
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), e.Message)
}

func (e *StatusError) Unwrap() error { return e.kind }

func statusKind(status int) error {
	switch status {
	case http.StatusNotFound:
		return sberr.ErrNotFound
	case http.StatusUnauthorized:
		return sberr.ErrUnauthorized
	case http.StatusForbidden:
		// envd's answer for a path the user may not touch; credentials
		// refused are 401.
		return sberr.ErrPermission
	case http.StatusTooManyRequests:
		return sberr.ErrRateLimited
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return sberr.ErrInvalidInput
	case http.StatusConflict:
		return sberr.ErrAlreadyExists
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return sberr.ErrUnavailable
	case http.StatusGatewayTimeout:
		return sberr.ErrTimeout
	case http.StatusNotImplemented:
		return sberr.ErrNotSupported
	}
	return nil
}

// readError builds a StatusError from a response, reading at most 64 KiB of
// body: an error page from inside a sandbox is hostile input too.
func readError(op string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(b))
	var j struct {
		Message string `json:"message"`
		Detail  string `json:"detail"`
	}
	if json.Unmarshal(b, &j) == nil {
		if j.Message != "" {
			msg = j.Message
		} else if j.Detail != "" {
			msg = j.Detail
		}
	}
	return &StatusError{Op: op, Status: resp.StatusCode, Message: msg, kind: statusKind(resp.StatusCode)}
}

// errHeaderTimeout and errStalled are the causes with which a call's
// watchdog cancels it.
var (
	errHeaderTimeout = errors.New("no response headers in time")
	errStalled       = errors.New("response stalled")
)

// watchdog cancels a call when its armed timer fires.
type watchdog struct {
	mu      sync.Mutex
	t       *time.Timer
	cancel  context.CancelCauseFunc
	stopped bool
}

func (w *watchdog) arm(d time.Duration, cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if w.t != nil {
		w.t.Stop()
	}
	w.t = time.AfterFunc(d, func() { w.cancel(cause) })
}

func (w *watchdog) disarm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t != nil {
		w.t.Stop()
		w.t = nil
	}
}

func (w *watchdog) stop() {
	w.mu.Lock()
	w.stopped = true
	if w.t != nil {
		w.t.Stop()
	}
	w.mu.Unlock()
	w.cancel(nil)
}

// sentBody arms the header timeout once the transport has read the whole
// request body: a long upload is not a late answer.
type sentBody struct {
	r    io.Reader
	done func()
	once sync.Once
}

func (b *sentBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil {
		b.once.Do(b.done)
	}
	return n, err
}

// WriteTo lets the transport's copy use the body's own WriteTo (an upload's
// bigChunkReader), not io.Copy's small buffer.
func (b *sentBody) WriteTo(w io.Writer) (int64, error) {
	var n int64
	var err error
	if wt, ok := b.r.(io.WriterTo); ok {
		n, err = wt.WriteTo(w)
	} else {
		n, err = io.Copy(w, struct{ io.Reader }{b.r})
	}
	b.once.Do(b.done)
	return n, err
}

// watchedBody bounds each wait for more response bytes, and ends the call's
// context when closed.
type watchedBody struct {
	rc    io.ReadCloser
	ctx   context.Context
	wd    *watchdog
	stall time.Duration
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.wd.arm(b.stall, errStalled)
	n, err := b.rc.Read(p)
	b.wd.disarm()
	if err != nil && errors.Is(context.Cause(b.ctx), errStalled) {
		err = fmt.Errorf("%w: no bytes from the sandbox for %s", sberr.ErrUnavailable, b.stall)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	err := b.rc.Close()
	b.wd.stop()
	return err
}

func (c *Client) do(ctx context.Context, op, method, u string, hdr http.Header, body io.Reader, contentType string) (*http.Response, error) {
	// The call's own context: the watchdog ends it when the sandbox sends
	// no headers or stops sending bytes, whatever the caller's context.
	cctx, cancel := context.WithCancelCause(ctx)
	wd := &watchdog{cancel: cancel}
	armHeaders := func() { wd.arm(c.o.HeaderTimeout, errHeaderTimeout) }
	if body != nil {
		body = &sentBody{r: body, done: armHeaders}
	} else {
		armHeaders()
	}
	req, err := http.NewRequestWithContext(cctx, method, u, body)
	if err != nil {
		wd.stop()
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.hc.Do(req)
	wd.disarm()
	if err != nil {
		wd.stop()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", op, ctx.Err())
		}
		if errors.Is(context.Cause(cctx), errHeaderTimeout) {
			return nil, fmt.Errorf("%s: %w: the sandbox sent no answer within %s", op, sberr.ErrUnavailable, c.o.HeaderTimeout)
		}
		if gone(err) {
			return nil, fmt.Errorf("%s: %w: the sandbox is no longer running (its lifetime ended or it was killed)", op, sberr.ErrUnavailable)
		}
		return nil, fmt.Errorf("%s: %w: %w", op, sberr.ErrUnavailable, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// A tunnel's connection outlives the call: no stall bound on it,
		// and its context stays alive (it ends with the caller's).
		return resp, nil
	}
	resp.Body = &watchedBody{rc: resp.Body, ctx: cctx, wd: wd, stall: c.o.StallTimeout}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, readError(op, resp)
	}
	return resp, nil
}

// gone reports a dial of a sandbox's unix socket that found nothing
// listening: the socket was removed (ENOENT) or nobody accepts on it any
// more (ECONNREFUSED). (Over TCP a refusal may be the network's doing.)
func gone(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" || op.Net != "unix" {
		return false
	}
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

func (c *Client) interpHeaders() http.Header {
	h := http.Header{}
	for k, v := range c.o.InterpreterHeaders {
		h[k] = v
	}
	if c.o.AccessToken != "" {
		h.Set("X-Access-Token", c.o.AccessToken)
	}
	return h
}

func (c *Client) jsonCall(ctx context.Context, op, method, base, path string, hdr http.Header, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		body = bytes.NewReader(b)
		ct = "application/json"
	}
	resp, err := c.do(ctx, op, method, base+path, hdr, body, ct)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s: decoding the answer: %w", op, err)
	}
	return nil
}

// Health returns nil when envd answers /health with 2xx.
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.do(ctx, "health", http.MethodGet, c.o.EnvdURL+"/health", c.o.EnvdHeaders, nil, "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ExecuteRequest is the body of POST /execute.
type ExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
	Timeout   float64           `json:"timeout,omitempty"` // our extension, seconds
}

// Line is one NDJSON line of an execution stream.
type Line struct {
	Type           string
	Text           string // stdout/stderr
	Timestamp      time.Time
	IsMainResult   bool
	Data           map[string]json.RawMessage // result: field -> raw value, as sent (text, html, png, …)
	Extra          map[string]json.RawMessage
	Name, Value    string
	Traceback      string
	ExecutionCount int
	ExitCode       int
	// execution_status (our extension)
	Interrupted, TimedOut, KernelDied bool
}

// ErrProtocol is a stream the client can't make sense of.
var ErrProtocol = errors.New("protocol error")

// DecodeLine parses one NDJSON line. It accepts both our agent's and E2B's
// server's spellings; the line is untrusted input.
func DecodeLine(b []byte) (Line, error) {
	if l, ok := fastLine(b); ok {
		return l, nil
	}
	return decodeLine(b)
}

// decodeLine is DecodeLine for any layout.
func decodeLine(b []byte) (Line, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Line{}, fmt.Errorf("%w: invalid NDJSON line: %w", ErrProtocol, err)
	}
	var l Line
	if err := json.Unmarshal(raw["type"], &l.Type); err != nil || l.Type == "" {
		return Line{}, fmt.Errorf("%w: line without a type", ErrProtocol)
	}
	str := func(k string) string {
		var s string
		if v, ok := raw[k]; ok {
			_ = json.Unmarshal(v, &s)
		}
		return s
	}
	switch l.Type {
	case "stdout", "stderr":
		l.Text = str("text")
		if ts := str("timestamp"); ts != "" {
			l.Timestamp, _ = time.Parse(time.RFC3339Nano, ts)
		}
		if v, ok := raw["timestamp"]; ok && l.Timestamp.IsZero() {
			var f float64
			if json.Unmarshal(v, &f) == nil && f > 0 {
				// E2B's JS fixtures carry epoch milliseconds or nanoseconds.
				switch {
				case f > 1e17:
					l.Timestamp = time.Unix(0, int64(f))
				case f > 1e11:
					l.Timestamp = time.UnixMilli(int64(f))
				default:
					l.Timestamp = time.Unix(int64(f), 0)
				}
			}
		}
	case "result":
		_ = json.Unmarshal(raw["is_main_result"], &l.IsMainResult)
		l.Data = map[string]json.RawMessage{}
		for k, v := range raw {
			switch k {
			case "type", "is_main_result":
			case "extra":
				_ = json.Unmarshal(v, &l.Extra)
			default:
				if string(v) != "null" {
					l.Data[k] = v
				}
			}
		}
	case "error":
		l.Name, l.Value = str("name"), str("value")
		if v, ok := raw["traceback"]; ok {
			var lines []string
			if json.Unmarshal(v, &lines) == nil {
				l.Traceback = strings.Join(lines, "\n")
			} else {
				l.Traceback = str("traceback")
			}
		}
	case "number_of_executions":
		_ = json.Unmarshal(raw["execution_count"], &l.ExecutionCount)
	case "exit_code":
		_ = json.Unmarshal(raw["exit_code"], &l.ExitCode)
	case "execution_status":
		_ = json.Unmarshal(raw["interrupted"], &l.Interrupted)
		_ = json.Unmarshal(raw["timed_out"], &l.TimedOut)
		_ = json.Unmarshal(raw["kernel_died"], &l.KernelDied)
	}
	return l, nil
}

// Execute runs code and calls fn for every line, live, until the stream's
// end_of_execution. A stream that ends without it is an error.
func (c *Client) Execute(ctx context.Context, req ExecuteRequest, fn func(Line)) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("execute: %w", err)
	}
	if c.o.Dial != nil {
		if err := c.executeConn(ctx, b, fn); !errors.Is(err, errNoExecConn) {
			return err
		}
	}
	resp, err := c.do(ctx, "execute", http.MethodPost, c.o.InterpreterURL+"/execute", c.interpHeaders(), bytes.NewReader(b), "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := ReadStream(ctx, resp.Body, c.o.MaxLineBytes, fn); err != nil {
		return err
	}
	// Read the (empty) rest so the connection is reused: closing a body
	// before EOF drops the connection, which the server takes for a client
	// that went away.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return nil
}

// ReadStream decodes an NDJSON execution stream with bounded lines.
func ReadStream(ctx context.Context, r io.Reader, maxLine int, fn func(Line)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readBoundedLine(br, maxLine)
		if len(bytes.TrimSpace(line)) > 0 {
			l, derr := DecodeLine(line)
			if derr != nil {
				return fmt.Errorf("execute: %w", derr)
			}
			if l.Type == "end_of_execution" {
				return nil
			}
			fn(l)
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("execute: %w", ctx.Err())
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("execute: %w: the stream ended before end_of_execution (the sandbox may have been killed or expired)", sberr.ErrUnavailable)
			}
			return fmt.Errorf("execute: %w", err)
		}
	}
}

func readBoundedLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > max {
			return nil, fmt.Errorf("%w: an output line exceeds %d bytes", ErrProtocol, max)
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, err
	}
}

// Context is a code context.
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CreateContext creates a kernel context.
func (c *Client) CreateContext(ctx context.Context, language, cwd string) (Context, error) {
	var out Context
	in := map[string]string{}
	if language != "" {
		in["language"] = language
	}
	if cwd != "" {
		in["cwd"] = cwd
	}
	err := c.jsonCall(ctx, "create context", http.MethodPost, c.o.InterpreterURL, "/contexts", c.interpHeaders(), in, &out)
	return out, err
}

// ListContexts lists contexts.
func (c *Client) ListContexts(ctx context.Context) ([]Context, error) {
	var out []Context
	err := c.jsonCall(ctx, "list contexts", http.MethodGet, c.o.InterpreterURL, "/contexts", c.interpHeaders(), nil, &out)
	return out, err
}

// DeleteContext deletes a context and its kernel.
func (c *Client) DeleteContext(ctx context.Context, id string) error {
	return c.jsonCall(ctx, "delete context", http.MethodDelete, c.o.InterpreterURL, "/contexts/"+url.PathEscape(id), c.interpHeaders(), nil, nil)
}

// RestartContext restarts a context's kernel (its state is lost).
func (c *Client) RestartContext(ctx context.Context, id string) error {
	return c.jsonCall(ctx, "restart context", http.MethodPost, c.o.InterpreterURL, "/contexts/"+url.PathEscape(id)+"/restart", c.interpHeaders(), nil, nil)
}

func ctxPath(id string) string {
	if id == "" {
		id = "default"
	}
	return "/x/contexts/" + url.PathEscape(id)
}

// Interrupt interrupts the execution running in a context (our extension).
func (c *Client) Interrupt(ctx context.Context, contextID string) (bool, error) {
	var out struct {
		Interrupted bool `json:"interrupted"`
	}
	err := c.jsonCall(ctx, "interrupt", http.MethodPost, c.o.InterpreterURL, ctxPath(contextID)+"/interrupt", c.interpHeaders(), nil, &out)
	return out.Interrupted, err
}

// GetVariable reads a variable as JSON; isRepr says the value could not be
// encoded as JSON and is its repr string instead.
func (c *Client) GetVariable(ctx context.Context, contextID, name string) (value json.RawMessage, isRepr bool, err error) {
	var out struct {
		Value json.RawMessage `json:"value"`
		Repr  bool            `json:"repr"`
	}
	err = c.jsonCall(ctx, "get variable", http.MethodGet, c.o.InterpreterURL, ctxPath(contextID)+"/variables/"+url.PathEscape(name), c.interpHeaders(), nil, &out)
	return out.Value, out.Repr, err
}

// SetVariable sets a variable from JSON.
func (c *Client) SetVariable(ctx context.Context, contextID, name string, value json.RawMessage) error {
	return c.setVariable(ctx, contextID, name, value, "application/json")
}

// SetVariableBytes sets a variable to a Python bytes object holding value
// (our agent only: the body is the raw bytes, application/octet-stream).
func (c *Client) SetVariableBytes(ctx context.Context, contextID, name string, value []byte) error {
	return c.setVariable(ctx, contextID, name, value, "application/octet-stream")
}

func (c *Client) setVariable(ctx context.Context, contextID, name string, value []byte, contentType string) error {
	resp, err := c.do(ctx, "set variable", http.MethodPut, c.o.InterpreterURL+ctxPath(contextID)+"/variables/"+url.PathEscape(name), c.interpHeaders(), bytes.NewReader(value), contentType)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// AgentInfo is GET /x/info.
type AgentInfo struct {
	ID        string    `json:"id"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	EndAt     time.Time `json:"end_at"`
	LastUsed  time.Time `json:"last_used"`
	Contexts  int       `json:"contexts"`
}

// Info asks our agent about itself.
func (c *Client) Info(ctx context.Context) (AgentInfo, error) {
	var out AgentInfo
	err := c.jsonCall(ctx, "info", http.MethodGet, c.o.EnvdURL, "/x/info", c.EnvdHeaders(), nil, &out)
	return out, err
}

// SetTimeout restarts the agent's lifetime countdown from now.
func (c *Client) SetTimeout(ctx context.Context, d time.Duration) (AgentInfo, error) {
	var out AgentInfo
	err := c.jsonCall(ctx, "set timeout", http.MethodPost, c.o.EnvdURL, "/x/timeout", c.EnvdHeaders(), map[string]float64{"timeout": d.Seconds()}, &out)
	return out, err
}

// SetIdleTimeout sets (or changes) how long the sandbox may stay unused
// before it ends itself (our agent only).
func (c *Client) SetIdleTimeout(ctx context.Context, d time.Duration) (AgentInfo, error) {
	var out AgentInfo
	err := c.jsonCall(ctx, "set idle timeout", http.MethodPost, c.o.EnvdURL, "/x/timeout", c.EnvdHeaders(), map[string]float64{"idle_timeout": d.Seconds()}, &out)
	return out, err
}

// SetTimeouts restarts the lifetime countdown with d and sets the idle
// timeout to idle (0 leaves it), in one call (our agent only).
func (c *Client) SetTimeouts(ctx context.Context, d, idle time.Duration) (AgentInfo, error) {
	body := map[string]float64{"timeout": d.Seconds()}
	if idle > 0 {
		body["idle_timeout"] = idle.Seconds()
	}
	var out AgentInfo
	err := c.jsonCall(ctx, "set timeouts", http.MethodPost, c.o.EnvdURL, "/x/timeout", c.EnvdHeaders(), body, &out)
	return out, err
}

// Warm starts the default python kernel, or waits for its start in
// progress (the warm pool calls it before counting a sandbox as ready).
func (c *Client) Warm(ctx context.Context) error {
	return c.jsonCall(ctx, "warm the default kernel", http.MethodPost, c.o.EnvdURL, "/x/warm", c.EnvdHeaders(), nil, nil)
}

// Shutdown asks the agent to end the sandbox.
func (c *Client) Shutdown(ctx context.Context) error {
	return c.jsonCall(ctx, "shutdown", http.MethodPost, c.o.EnvdURL, "/x/shutdown", c.EnvdHeaders(), nil, nil)
}

// ReadFile streams a file out of the sandbox.
func (c *Client) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	q := url.Values{"path": {path}}
	if c.o.User != "" {
		q.Set("username", c.o.User)
	}
	resp, err := c.do(ctx, "read "+path, http.MethodGet, c.o.EnvdURL+"/files?"+q.Encode(), c.EnvdHeaders(), nil, "")
	if err != nil {
		return nil, err
	}
	return bigChunkBody{resp.Body}, nil
}

// fileChunk is the unit a file moves in: io.Copy's 32 KiB (8 KiB into
// io.Discard) costs a system call or two per chunk at each end, which
// bounded transfers to a few hundred MB/s; 1 MiB is a flat amount of memory
// per transfer, whatever the file's size.
const fileChunk = 1 << 20

// bigChunkBody makes io.Copy from a download move fileChunk at a time.
type bigChunkBody struct{ io.ReadCloser }

func (b bigChunkBody) WriteTo(w io.Writer) (int64, error) {
	return io.CopyBuffer(w, struct{ io.Reader }{b.ReadCloser}, make([]byte, fileChunk))
}

// bigChunkReader makes the HTTP transport's copy of an upload move
// fileChunk at a time (it unwraps the body and uses io.Copy, which takes a
// WriterTo).
type bigChunkReader struct{ r io.Reader }

func (b bigChunkReader) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b bigChunkReader) WriteTo(w io.Writer) (int64, error) {
	return io.CopyBuffer(w, struct{ io.Reader }{b.r}, make([]byte, fileChunk))
}

// WriteFile streams r into a file in the sandbox (octet-stream upload,
// envd ≥ 0.5.7), creating parent directories.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader) error {
	q := url.Values{"path": {path}}
	if c.o.User != "" {
		q.Set("username", c.o.User)
	}
	resp, err := c.do(ctx, "write "+path, http.MethodPost, c.o.EnvdURL+"/files?"+q.Encode(), c.EnvdHeaders(), bigChunkReader{r}, "application/octet-stream")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return nil
}

// DialPort opens a TCP tunnel to a port inside the sandbox through the agent.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	tr, ok := c.hc.Transport.(*http.Transport)
	if !ok || tr.DialContext == nil {
		return nil, fmt.Errorf("dial port %d: %w: this transport can't tunnel", port, sberr.ErrNotSupported)
	}
	u, err := url.Parse(c.o.EnvdURL)
	if err != nil {
		return nil, err
	}
	conn, err := tr.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("dial port %d: %w", port, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.o.EnvdURL+"/x/forward/"+strconv.Itoa(port), nil)
	for k, v := range c.EnvdHeaders() {
		req.Header[k] = v
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial port %d: %w", port, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial port %d: %w", port, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return nil, readError(fmt.Sprintf("dial port %d", port), resp)
	}
	_ = conn.SetDeadline(time.Time{})
	return &bufConn{Conn: conn, r: br}, nil
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *bufConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
