package e2b

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// dataTransport carries every data-plane request of one sandbox (envd and the
// code interpreter). Over the plain HTTP transport it
//
//   - answers requests for our /x/ extension itself when the host lacks it
//     (E2B's own servers): variables as 501 (→ ErrNotSupported, with the
//     reason), interrupt as {"interrupted": false};
//   - turns the edge proxy's 502 "sandbox not found" into a not-found answer
//     saying the sandbox expired or was killed (→ ErrNotFound), in the form
//     each surface's client reads: JSON for /execute, /contexts and /files, a
//     Connect end-stream error for streaming RPCs (unary RPCs keep
//     "unavailable": there a not-found would read as "no such file" or "no
//     such process", e.g. Exists answering false, instead of an error).
type dataTransport struct {
	base    http.RoundTripper
	id      string
	envdURL string
	envdHdr http.Header

	mu  sync.Mutex
	ext int // 0 unknown, 1 the host serves /x/, -1 it does not
}

// probeTimeout bounds the one-off GET /x/info.
const probeTimeout = 15 * time.Second

// extension reports whether the host serves our /x/ extension, probing once
// (GET /x/info on envd: our agent answers, E2B's envd answers 404). An
// inconclusive probe (network error, 5xx) is not remembered.
func (t *dataTransport) extension(ctx context.Context) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ext != 0 {
		return t.ext > 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.envdURL+"/x/info", nil)
	if err != nil {
		return false, err
	}
	for k, v := range t.envdHdr {
		req.Header[k] = v
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return false, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		t.ext = 1
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented:
		t.ext = -1
	default:
		return false, fmt.Errorf("probing for the /x/ extension: %d", resp.StatusCode)
	}
	return t.ext > 0, nil
}

func (t *dataTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasPrefix(req.URL.Path, "/x/") {
		if ok, err := t.extension(req.Context()); err == nil && !ok {
			if req.Body != nil {
				req.Body.Close()
			}
			if strings.HasSuffix(req.URL.Path, "/interrupt") {
				return synth(req, http.StatusOK, "application/json", []byte(`{"interrupted": false}`)), nil
			}
			b, _ := json.Marshal(map[string]any{"code": http.StatusNotImplemented, "message": fmt.Sprintf(
				"%s: this E2B host lacks code-sandboxes' /x/ extension (variables, interrupt); E2B's own servers never have it, code-sandboxes serve does", req.URL.Path)})
			return synth(req, http.StatusNotImplemented, "application/json", b), nil
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusBadGateway {
		return resp, err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	msg := fmt.Sprintf("sandbox %s is gone: it expired or was killed", t.id)
	var j struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &j) == nil && j.Message != "" {
		msg += " (E2B's proxy: " + clip(j.Message, 256) + ")"
	}
	ct := req.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/connect+"):
		// A Connect streaming call: an end-stream frame carrying the error
		// (the codec of the request, JSON payload as the protocol says).
		payload, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "not_found", "message": msg}})
		var frame bytes.Buffer
		frame.WriteByte(0x02)
		_ = binary.Write(&frame, binary.BigEndian, uint32(len(payload)))
		frame.Write(payload)
		return synth(req, http.StatusOK, ct, frame.Bytes()), nil
	case req.Header.Get("Connect-Protocol-Version") != "":
		payload, _ := json.Marshal(map[string]string{"code": "unavailable", "message": msg})
		return synth(req, http.StatusServiceUnavailable, "application/json", payload), nil
	}
	payload, _ := json.Marshal(map[string]any{"code": http.StatusNotFound, "message": msg})
	return synth(req, http.StatusNotFound, "application/json", payload), nil
}

func synth(req *http.Request, status int, ct string, body []byte) *http.Response {
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {ct}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

func (t *dataTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
