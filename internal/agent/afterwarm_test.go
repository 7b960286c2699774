package agent_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/agent"
	"github.com/code-sandboxes/code-sandboxes/internal/client"
)

// TestAfterWarm: Config.AfterWarm (the local variant starts the root
// broker there) runs once the prewarmed kernel has answered and no request
// is in flight: not while the first execution, sent before the kernel was
// up, still runs, and only once.
func TestAfterWarm(t *testing.T) {
	dir := t.TempDir()
	// A python that starts 300 ms late, so that the execution below is
	// surely in flight before the kernel answers.
	py := filepath.Join(dir, "slow-python")
	if err := os.WriteFile(py, []byte("#!/bin/sh\nsleep 0.3\nexec /usr/bin/python3 \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "cell-ran")
	calls := make(chan bool, 4) // whether the cell had run by then
	s := agent.New(agent.Config{Python: py, Workdir: dir, Prewarm: true, AccessToken: "t",
		AfterWarm: func() {
			_, err := os.Stat(marker)
			calls <- err == nil
		}})
	c := serveInProcess(t, s, dir)
	code := "import time; time.sleep(0.2); open(" + pyQuote(marker) + ", 'w').close()"
	if err := c.Execute(ctx(t), client.ExecuteRequest{Code: code}, func(client.Line) {}); err != nil {
		t.Fatal(err)
	}
	select {
	case ran := <-calls:
		if !ran {
			t.Fatal("AfterWarm ran while the first execution was in flight")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AfterWarm did not run after the kernel answered and the execution ended")
	}
	if err := c.Execute(ctx(t), client.ExecuteRequest{Code: "1"}, func(client.Line) {}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-calls:
		t.Fatal("AfterWarm ran twice")
	case <-time.After(200 * time.Millisecond):
	}
}

// TestAfterWarmIdle: with no request at all, AfterWarm runs once the
// prewarmed kernel answers.
func TestAfterWarmIdle(t *testing.T) {
	dir := t.TempDir()
	called := make(chan struct{})
	s := agent.New(agent.Config{Python: "/usr/bin/python3", Workdir: dir, Prewarm: true, AccessToken: "t",
		AfterWarm: func() { close(called) }})
	serveInProcess(t, s, dir)
	select {
	case <-called:
	case <-time.After(30 * time.Second):
		t.Fatal("AfterWarm did not run with the sandbox idle")
	}
}

// serveInProcess serves s on a socket in dir until the test ends and
// returns a client of it (token "t").
func serveInProcess(t *testing.T, s *agent.Server, dir string) *client.Client {
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { s.Serve(sctx, ln); close(served) }()
	t.Cleanup(func() { cancel(); <-served })
	return client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: client.UnixHTTPClient(sock), AccessToken: "t"})
}

func pyQuote(s string) string {
	b := []byte{'\''}
	for _, r := range []byte(s) {
		if r == '\'' || r == '\\' {
			b = append(b, '\\')
		}
		b = append(b, r)
	}
	return string(append(b, '\''))
}
