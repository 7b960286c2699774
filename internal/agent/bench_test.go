package agent_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/agent"
	"github.com/code-sandboxes/code-sandboxes/internal/client"
)

// BenchmarkExecConnRoundTrip: x + 2 over the lean execution connection
// (what the Go API sends), agent and client in this process, so that
// -benchmem and -cpuprofile/-memprofile see both sides (the kernel is a
// real python3 process):
//
//	GOMAXPROCS=1 go test ./internal/agent -run - -bench ExecConnRoundTrip -benchmem
func BenchmarkExecConnRoundTrip(b *testing.B) {
	dir := b.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := agent.New(agent.Config{AccessToken: "tok", Python: "/usr/bin/python3", Workdir: dir})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, ln); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	c := client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: client.UnixHTTPClient(sock), Dial: client.UnixDial(sock), AccessToken: "tok"})
	run := func(code string) {
		got := ""
		if err := c.Execute(ctx, client.ExecuteRequest{Code: code}, func(l client.Line) {
			if l.Type == "result" {
				got = string(l.Data["text"])
			}
		}); err != nil {
			b.Fatal(err)
		}
		if code == "x + 2" && got != `"42"` {
			b.Fatalf("x + 2: %s", got)
		}
	}
	run("x = 40")
	run("x + 2")
	for b.Loop() {
		run("x + 2")
	}
}
