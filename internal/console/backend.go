package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// maxAPIAnswer bounds what the console reads of one control-plane answer:
// a list of a team's sandboxes or templates is far below it.
const maxAPIAnswer = 8 << 20

// backend calls serve's own handler in process, with the session's key
// added here on the server: the browser never holds the key, and every
// call is checked by the API exactly as an SDK's would be (team scoping,
// quotas, the network ceiling), so the console can show or do nothing
// that the key could not.
type backend struct {
	h http.Handler
}

// apiError is an answer of the API other than 2xx, with its message.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// newRequest builds a fresh request: nothing of the browser's request
// (its cookies, headers or host) goes through.
func newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	r, err := http.NewRequestWithContext(ctx, method, "http://console.invalid"+path, body)
	if err != nil {
		return nil, err
	}
	if r.Body == nil {
		r.Body = http.NoBody
	}
	// No dot in the host: it can never read as a sandbox's <port>-<id>.<domain>.
	r.Host = "console"
	r.RemoteAddr = "127.0.0.1:0"
	r.RequestURI = r.URL.RequestURI()
	return r, nil
}

// call makes a control-plane call as key and decodes a JSON answer into out
// (nil: ignored).
func (b *backend) call(ctx context.Context, key, method, path string, in, out any) error {
	_, err := b.callHeader(ctx, key, method, path, in, out)
	return err
}

// callHeader is call that also returns the answer's header.
func (b *backend) callHeader(ctx context.Context, key, method, path string, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		j, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(j)
	}
	r, err := newRequest(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	r.Header.Set("X-API-Key", key)
	if in != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.do(r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxAPIAnswer {
		return nil, fmt.Errorf("the answer to %s %s is larger than %d bytes", method, path, maxAPIAnswer)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		if e.Message == "" {
			e.Message = strings.TrimSpace(string(data))
		}
		return resp.Header, &apiError{Status: resp.StatusCode, Message: e.Message}
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return resp.Header, nil
	}
	return resp.Header, json.Unmarshal(data, out)
}

// statusOf is the HTTP status an error from call stands for.
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return http.StatusBadGateway
}

// sandboxClient is an http client (connect's HTTPClient too) whose requests
// go to one sandbox's envd through serve's data plane, with the sandbox's
// envd access token, which the console got from the API with the
// session's key.
type sandboxClient struct {
	b     *backend
	id    string
	token string
}

func (c *sandboxClient) Do(r *http.Request) (*http.Response, error) {
	fresh, err := newRequest(r.Context(), r.Method, r.URL.RequestURI(), r.Body)
	if err != nil {
		return nil, err
	}
	for _, h := range []string{"Content-Type", "Connect-Protocol-Version", "Connect-Timeout-Ms", "Connect-Content-Encoding", "Connect-Accept-Encoding", "Accept-Encoding", "Content-Length", "Accept"} {
		if v := r.Header.Values(h); len(v) > 0 {
			fresh.Header[h] = v
		}
	}
	fresh.ContentLength = r.ContentLength
	if fresh.ContentLength == 0 && r.Body != nil && r.Body != http.NoBody {
		fresh.ContentLength = -1 // a stream (an upload): 0 would send no body at all
	}
	fresh.Header.Set("E2b-Sandbox-Id", c.id)
	if c.token != "" {
		fresh.Header.Set("X-Access-Token", c.token)
	}
	return c.b.do(fresh)
}

// do runs the handler on r in a goroutine and returns as soon as it has
// written its header, its body streaming through a pipe: Connect's server
// streams (a command's output) arrive as they are written.
func (b *backend) do(r *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	rw := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				// ReverseProxy aborts a broken stream with a panic; here it
				// ends this body with an error, not the process.
				rw.WriteHeader(http.StatusBadGateway)
				pw.CloseWithError(fmt.Errorf("the server aborted the answer: %v", p))
				return
			}
			rw.WriteHeader(http.StatusOK)
			pw.Close()
		}()
		b.h.ServeHTTP(rw, r)
	}()
	select {
	case <-rw.ready:
	case <-r.Context().Done():
		pr.CloseWithError(r.Context().Err())
		return nil, r.Context().Err()
	}
	return &http.Response{Status: http.StatusText(rw.status), StatusCode: rw.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rw.sent, Body: pr, ContentLength: -1, Request: r}, nil
}

type pipeWriter struct {
	header http.Header
	sent   http.Header
	status int
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
}

func (p *pipeWriter) Header() http.Header { return p.header }

func (p *pipeWriter) WriteHeader(code int) {
	p.once.Do(func() {
		p.status = code
		p.sent = p.header.Clone()
		close(p.ready)
	})
}

func (p *pipeWriter) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return p.pw.Write(b)
}

func (p *pipeWriter) Flush() { p.WriteHeader(http.StatusOK) }

// query builds a path with its query.
func query(path string, kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return path + "?" + v.Encode()
}
