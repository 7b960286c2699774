package jupyter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Bounds of what the server may send: a REST answer (a listing, a file's
// model with its base64 content) and an error body.
const (
	maxAnswerBytes = 96 << 20
	maxErrorBytes  = 64 << 10
	callTimeout    = 3 * time.Minute
)

// APIError is a non-2xx answer of the Jupyter Server.
type APIError struct {
	Op      string
	Status  int
	Message string
	kind    error
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s: Jupyter Server answered %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), e.Message)
}

func (e *APIError) Unwrap() error { return e.kind }

func kindOf(status int) error {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return sberr.ErrUnauthorized
	case http.StatusNotFound:
		return sberr.ErrNotFound
	case http.StatusConflict:
		return sberr.ErrAlreadyExists
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return sberr.ErrInvalidInput
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusInternalServerError:
		return sberr.ErrUnavailable
	case http.StatusGatewayTimeout:
		return sberr.ErrTimeout
	}
	return nil
}

// headers are the ones every request carries: the caller's, then the token.
func (c *conf) headers(h http.Header) {
	for k, v := range c.header {
		h[k] = v
	}
	if c.token != "" {
		h.Set("Authorization", "token "+c.token)
	}
}

// url is the server's URL of an API path ("/api/...").
func (c *conf) url(p string) string { return c.base.String() + p }

// call makes one REST call with a JSON body (in, or nil) and decodes a
// bounded JSON answer into out (or discards it).
func (c *conf) call(ctx context.Context, op, method, p string, in, out any) error {
	// Every call ends: a server that stops sending mid-answer can't hold
	// one forever (starting a kernel on a loaded host takes seconds).
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(p), body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	c.headers(req.Header)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", op, ctx.Err())
		}
		return fmt.Errorf("%s: %w: the Jupyter Server at %s did not answer: %w", op, sberr.ErrUnavailable, c.base.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return answerError(op, resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBytes))
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return fmt.Errorf("%s: reading the answer: %w", op, err)
	}
	if len(b) > maxAnswerBytes {
		return fmt.Errorf("%s: %w: the Jupyter Server's answer exceeds %d bytes", op, sberr.ErrInvalidInput, maxAnswerBytes)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: %w: decoding the Jupyter Server's answer: %w", op, sberr.ErrUnavailable, err)
	}
	return nil
}

// answerError reads a bounded error body. Jupyter's is {"message", "reason"}.
func answerError(op string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	var j struct {
		Message string `json:"message"`
		Reason  string `json:"reason"`
	}
	msg := ""
	if json.Unmarshal(b, &j) == nil {
		msg = strings.TrimSpace(j.Message)
		if msg == "" {
			msg = j.Reason
		}
	}
	if msg == "" {
		msg = strings.TrimSpace(string(b))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
	}
	e := &APIError{Op: op, Status: resp.StatusCode, Message: msg, kind: kindOf(resp.StatusCode)}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		e.Message = "the server refused the credentials (check jupyter.Options.Token or $JUPYTER_TOKEN: it must be the server's token)"
		if msg != "" {
			e.Message += "; it said: " + msg
		}
	}
	return e
}

// isNotFound says whether err is a 404 of the server.
func isNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// kernelSpecs is GET /api/kernelspecs.
type kernelSpecs struct {
	Default     string `json:"default"`
	Kernelspecs map[string]struct {
		Name string `json:"name"`
		Spec struct {
			Language    string `json:"language"`
			DisplayName string `json:"display_name"`
		} `json:"spec"`
	} `json:"kernelspecs"`
}

func (c *conf) kernelSpecs(ctx context.Context) (kernelSpecs, error) {
	var ks kernelSpecs
	err := c.call(ctx, "list kernel specs", http.MethodGet, "/api/kernelspecs", nil, &ks)
	return ks, err
}

// session is a Jupyter session (GET /api/sessions).
type session struct {
	ID     string `json:"id"`
	Path   string `json:"path"`
	Name   string `json:"name"`
	Type   string `json:"type"`
	Kernel struct {
		ID             string `json:"id"`
		Name           string `json:"name"`
		ExecutionState string `json:"execution_state"`
	} `json:"kernel"`
}

func (c *conf) sessions(ctx context.Context) ([]session, error) {
	var s []session
	err := c.call(ctx, "list sessions", http.MethodGet, "/api/sessions", nil, &s)
	return s, err
}
