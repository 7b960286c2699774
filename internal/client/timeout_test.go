package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// slowReader yields n bytes, one every d.
type slowReader struct {
	n int
	d time.Duration
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.d)
	r.n--
	p[0] = 'x'
	return 1, nil
}

// TestHostileServerCannotHang: a sandbox that never answers, or answers and
// then stops sending, ends the call with ErrUnavailable once the header or
// stall timeout passes, even under a caller's context without a deadline.
// A slow upload is not a late answer: the header timeout starts once the
// request is sent.
func TestHostileServerCannotHang(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /execute", func(w http.ResponseWriter, r *http.Request) {
		<-release // never answers
	})
	mux.HandleFunc("GET /files", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		<-release // then stalls
	})
	mux.HandleFunc("POST /files", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, strings.Repeat("y", int(n)))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)
	c := New(Options{EnvdURL: srv.URL, HeaderTimeout: 300 * time.Millisecond, StallTimeout: 300 * time.Millisecond})

	run := func(name string, f func() error) error {
		t.Helper()
		ch := make(chan error, 1)
		go func() { ch <- f() }()
		select {
		case err := <-ch:
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: still hanging after 20s", name)
			return nil
		}
	}
	err := run("execute", func() error {
		return c.Execute(context.Background(), ExecuteRequest{Code: "1"}, func(Line) {})
	})
	if !errors.Is(err, sberr.ErrUnavailable) {
		t.Errorf("no headers: %v, want ErrUnavailable", err)
	}
	err = run("read", func() error {
		rc, err := c.ReadFile(context.Background(), "/x")
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.ReadAll(rc)
		return err
	})
	if !errors.Is(err, sberr.ErrUnavailable) {
		t.Errorf("stalled body: %v, want ErrUnavailable", err)
	}
	err = run("slow upload", func() error {
		return c.WriteFile(context.Background(), "/x", &slowReader{n: 8, d: 100 * time.Millisecond})
	})
	if err != nil {
		t.Errorf("an upload slower than the header timeout failed: %v", err)
	}
}
