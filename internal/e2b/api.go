package e2b

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

// Bounds on what we read from the API: a list page of 100 sandboxes is a
// few tens of KiB; an error body is text for a message.
const (
	maxAPIBody   = 8 << 20
	maxErrorBody = 64 << 10
)

// apiTimeout bounds one control-plane call (the SDKs' requestTimeout is 60 s;
// a create may take longer on a busy cloud).
const apiTimeout = 2 * time.Minute

var apiHTTP = &http.Client{Transport: &http.Transport{
	Proxy:               http.ProxyFromEnvironment,
	ForceAttemptHTTP2:   true,
	MaxIdleConnsPerHost: 8,
	IdleConnTimeout:     90 * time.Second,
	TLSHandshakeTimeout: 15 * time.Second,
}}

// APIError is a non-2xx answer of E2B's API: {"code", "message", "error_code"}.
type APIError struct {
	Op        string
	Status    int
	Message   string
	ErrorCode string
	hint      string
	kind      error
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s: E2B API answered %d %s", e.Op, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.ErrorCode != "" {
		s += " (" + e.ErrorCode + ")"
	}
	if e.hint != "" {
		s += "; " + e.hint
	}
	return s
}

func (e *APIError) Unwrap() error { return e.kind }

// asAPIError is the APIError in err's chain, or nil.
func asAPIError(err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}

// sandboxCreate is E2B's NewSandbox body.
type sandboxCreate struct {
	TemplateID          string            `json:"templateID"`
	Timeout             int64             `json:"timeout"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	Secure              bool              `json:"secure"`
	AllowInternetAccess bool              `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network,omitempty"`
}

type networkConfig struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

// sandboxJSON is E2B's Sandbox (create and connect answers).
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
	Alias              string  `json:"alias"`
}

// sandboxDetail is E2B's SandboxDetail and ListedSandbox (the latter lacks
// the access token, network and domain).
type sandboxDetail struct {
	TemplateID          string            `json:"templateID"`
	SandboxID           string            `json:"sandboxID"`
	Alias               string            `json:"alias"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	CPUCount            float64           `json:"cpuCount"`
	MemoryMB            int64             `json:"memoryMB"`
	State               string            `json:"state"`
	EnvdVersion         string            `json:"envdVersion"`
	Metadata            map[string]string `json:"metadata"`
	EnvdAccessToken     string            `json:"envdAccessToken"`
	AllowInternetAccess *bool             `json:"allowInternetAccess"`
	Domain              *string           `json:"domain"`
	Network             *networkConfig    `json:"network"`
}

// api is the control-plane client.
type api struct{ c *conf }

// call sends one request; out (when non-nil) receives the decoded 2xx body.
// sandboxID names the sandbox the call is about, for error messages.
func (a api) call(ctx context.Context, op, method, path, sandboxID string, in, out any) (http.Header, error) {
	if err := a.c.checkKey(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.c.apiURL+path, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", op, sberr.ErrInvalidConfig, err)
	}
	req.Header.Set("X-API-Key", a.c.apiKey)
	req.Header.Set("User-Agent", "code-sandboxes")
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := apiHTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%s: %w: %w", op, sberr.ErrTimeout, ctx.Err())
			}
			return nil, fmt.Errorf("%s: %w", op, ctx.Err())
		}
		return nil, fmt.Errorf("%s: the E2B API at %s is unreachable: %w: %w", op, a.c.apiURL, sberr.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.Header, a.apiError(op, sandboxID, resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return resp.Header, nil
	}
	lr := &io.LimitedReader{R: resp.Body, N: maxAPIBody + 1}
	b, err := io.ReadAll(lr)
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer: %w: %w", op, sberr.ErrUnavailable, err)
	}
	if len(b) > maxAPIBody {
		return nil, fmt.Errorf("%s: the E2B API's answer is larger than %d bytes", op, maxAPIBody)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("%s: decoding the E2B API's answer: %w", op, err)
	}
	return resp.Header, nil
}

// apiError maps an error answer: 401 → ErrUnauthorized (saying where the key
// came from), 429 → ErrRateLimited, 404 on a sandbox → ErrNotFound (it
// expired or was killed), 400 → ErrInvalidConfig on create, else
// ErrInvalidInput, 5xx → ErrUnavailable, 501 → ErrNotSupported.
func (a api) apiError(op, sandboxID string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Op: op, Status: resp.StatusCode}
	var j struct {
		Code      json.RawMessage `json:"code"`
		Message   string          `json:"message"`
		ErrorCode string          `json:"error_code"`
	}
	if json.Unmarshal(b, &j) == nil && (j.Message != "" || j.ErrorCode != "") {
		e.Message, e.ErrorCode = j.Message, j.ErrorCode
	} else {
		e.Message = clip(strings.TrimSpace(string(b)), 512)
	}
	switch s := resp.StatusCode; {
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		e.kind = sberr.ErrUnauthorized
		e.hint = "the API key came from " + a.c.keySource + " (set e2b.Options.APIKey or E2B_API_KEY to a valid key)"
	case s == http.StatusTooManyRequests:
		e.kind = sberr.ErrRateLimited
		e.hint = "E2B rate-limited the request; retry later or lower the request rate"
	case s == http.StatusNotFound && sandboxID != "":
		e.kind = sberr.ErrNotFound
		e.hint = fmt.Sprintf("sandbox %s is gone: it expired or was killed", sandboxID)
	case s == http.StatusNotFound:
		e.kind = sberr.ErrNotFound
	case s == http.StatusBadRequest || s == http.StatusUnprocessableEntity:
		e.kind = sberr.ErrInvalidInput
		if strings.HasPrefix(op, "create") {
			e.kind = sberr.ErrInvalidConfig
		}
	case s == http.StatusConflict:
		e.kind = sberr.ErrAlreadyExists
	case s == http.StatusNotImplemented:
		e.kind = sberr.ErrNotSupported
	case s == http.StatusGatewayTimeout:
		e.kind = sberr.ErrTimeout
	case s >= 500:
		e.kind = sberr.ErrUnavailable
	}
	return e
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
