// One HTTP call to the agent: status errors, the header and stall watchdog, JSON calls, health.

package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

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
