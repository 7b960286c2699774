package hostile_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/agent"
	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// Fuzz targets for every decoder that reads bytes a sandbox or the network
// controls. (The kernel's frame decoder has its own, internal/kernel
// FuzzReadFrame.) Run one with: go test ./hostile -run XXX -fuzz FuzzReadStream

// FuzzDecodeLine: one NDJSON line of an /execute stream, as a hostile agent
// (or anything in the sandbox that took it over) may send it.
func FuzzDecodeLine(f *testing.F) {
	for _, s := range []string{`{"type": "stdout", "text": "hi\n", "timestamp": "2026-11-29T21:00:00.123456Z"}`,
		`{"type": "result", "is_main_result": true, "text": "42", "png": "AAAA", "extra": {"a/b": 1}}`,
		`{"type": "error", "name": "E", "value": "v", "traceback": "t"}`, `{"type": "number_of_executions", "execution_count": 1e400}`,
		`{"type": "exit_code", "exit_code": -99999999999999999999}`, `{"type": "end_of_execution"}`, `{`, `null`, `[]`, "\xff\xfe"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = client.DecodeLine(b)
	})
}

// FuzzReadStream: a whole stream, bounded lines; it must end with nil (an
// end_of_execution), an error, never a panic or unbounded growth.
func FuzzReadStream(f *testing.F) {
	f.Add([]byte("{\"type\": \"stdout\", \"text\": \"a\"}\n{\"type\": \"end_of_execution\"}\n"))
	f.Add([]byte("{\"type\": \"stdout\"\n"))
	f.Add([]byte(strings.Repeat("x", 5000)))
	f.Add([]byte("\n\n\n{\"type\": \"keepalive\"}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		err := client.ReadStream(context.Background(), bytes.NewReader(b), 1024, func(client.Line) { n++ })
		if err == nil && !bytes.Contains(b, []byte("end_of_execution")) {
			t.Fatalf("stream without end_of_execution accepted")
		}
		if n > len(b) {
			t.Fatalf("%d lines from %d bytes", n, len(b))
		}
	})
}

// FuzzExecuteResponse: the public API over a hostile /execute answer.
func FuzzExecuteResponse(f *testing.F) {
	f.Add(200, []byte("{\"type\": \"result\", \"is_main_result\": true, \"text\": \"x\"}\n{\"type\": \"end_of_execution\"}\n"))
	f.Add(500, []byte("boom"))
	f.Add(200, []byte("{\"type\": \"error\"}"))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 200 || status > 599 {
			status = 200
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			_, _ = w.Write(body)
		}))
		defer srv.Close()
		c := client.New(client.Options{EnvdURL: srv.URL, InterpreterURL: srv.URL, MaxLineBytes: 1 << 16})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Execute(ctx, client.ExecuteRequest{Code: "1"}, func(client.Line) {})
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatal("HANG: Execute on a finished response")
		}
	})
}

// FuzzAgentHTTP: every agent endpoint with a hostile method, path, token
// and body. Its kernels would be started with a python that does not
// exist, so nothing runs on the host.
func FuzzAgentHTTP(f *testing.F) {
	f.Add("POST", "/execute", "tok", []byte(`{"code":"1"}`))
	f.Add("POST", "/contexts", "tok", []byte(`{"language":"python","cwd":"/tmp"}`))
	f.Add("PUT", "/x/contexts/default/variables/v", "tok", []byte(`{"a":[1,2]}`))
	f.Add("POST", "/x/timeout", "tok", []byte(`{"timeout":1e308}`))
	f.Add("GET", "/x/forward/1", "bad", []byte(nil))
	f.Add("DELETE", "/contexts/../x", "tok", []byte(nil))
	f.Fuzz(func(t *testing.T, method, path, token string, body []byte) {
		if method == "" || strings.ContainsAny(method, " \r\n\t()<>@,;:\\\"/[]?={}") || !strings.HasPrefix(path, "/") ||
			strings.Contains(path, "shutdown") || strings.HasPrefix(path, "/x/forward") {
			return
		}
		s := agent.New(agent.Config{ID: "fuzz", AccessToken: "tok", Python: "/nonexistent/python3", Workdir: os.TempDir()})
		defer s.Close()
		req, err := http.NewRequest(method, "http://agent"+path, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("X-Access-Token", token)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req.WithContext(ctx))
		if token != "tok" && path != "/health" && rec.Code != http.StatusUnauthorized {
			t.Fatalf("%s %s with token %q: %d, want 401", method, path, token, rec.Code)
		}
	})
}

// FuzzServerHTTP: serve's control plane and data-plane routing with a hostile
// method, path, Host, routing headers and body. Its runtime directory is a
// regular file, so a request that gets as far as creating a sandbox fails
// instead of starting one.
func FuzzServerHTTP(f *testing.F) {
	f.Add("POST", "/sandboxes", "127.0.0.1", "", "", []byte(`{"templateID":"base","timeout":10,"metadata":{"a":"b"}}`))
	f.Add("GET", "/v2/sandboxes?nextToken=MTIzLmFiYw&metadata=a%3Db", "127.0.0.1", "", "", []byte(nil))
	f.Add("GET", "/health", "49983-abc.localhost", "", "", []byte(nil))
	f.Add("POST", "/execute", "x", "abc", "49999", []byte(`{"code":"1"}`))
	f.Add("POST", "/sandboxes/abc/timeout", "x", "", "", []byte(`{"timeout":-1}`))
	file := filepath.Join(f.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		f.Fatal(err)
	}
	s, err := e2bserver.New(e2bserver.Options{APIKeys: []string{testKey}, Config: sandboxes.Config{Options: local.Options{RuntimeDir: file}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path, host, sbID, sbPort string, body []byte) {
		if method == "" || strings.ContainsAny(method, " \r\n\t()<>@,;:\\\"/[]?={}") || !strings.HasPrefix(path, "/") {
			return
		}
		req, err := http.NewRequest(method, "http://x"+path, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Host = host
		req.Header.Set("X-API-Key", testKey)
		if sbID != "" {
			req.Header.Set("E2b-Sandbox-Id", sbID)
			req.Header.Set("E2b-Sandbox-Port", sbPort)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req.WithContext(ctx))
		if rec.Code == http.StatusCreated {
			t.Fatalf("a sandbox was created with a runtime directory that is a file")
		}
	})
}
