package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// slowLeanAgent serves lean connections that answer each request after
// the delay its code names ("1 + 1" at once, "sleep" after 300 ms) and stay
// open for the next.
func slowLeanAgent(t *testing.T) string {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /x/exec", func(w http.ResponseWriter, r *http.Request) {
		conn, brw, _ := http.NewResponseController(w).Hijack()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: cs-exec\r\n\r\n")
		_ = brw.Flush()
		go func() {
			defer conn.Close()
			bw := bufio.NewWriter(conn)
			for {
				var hdr [4]byte
				if _, err := io.ReadFull(brw, hdr[:]); err != nil {
					return
				}
				body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
				if _, err := io.ReadFull(brw, body); err != nil {
					return
				}
				if bytes.Contains(body, []byte("sleep")) {
					time.Sleep(300 * time.Millisecond)
				}
				_, _ = bw.WriteString(oneResult)
				_ = bw.Flush()
			}
		}()
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// The caller spins for a quick answer instead of sleeping, doesn't spin
// for a new connection's first execution nor the one after a long one,
// spins again once answers are quick, and never when spinning is off.
func TestExecConnSpin(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Log("one CPU: the client never spins here, nothing to check") // the machine, not a missing dependency
		return
	}
	sock := slowLeanAgent(t)
	c := New(Options{EnvdURL: "http://sandbox", HTTPClient: UnixHTTPClient(sock), Dial: UnixDial(sock)})
	run := func(code string) {
		t.Helper()
		got := ""
		if err := c.Execute(context.Background(), ExecuteRequest{Code: code}, func(l Line) { got = string(l.Data["text"]) }); err != nil || got != `"2"` {
			t.Fatalf("%s: %q, %v", code, got, err)
		}
	}
	defer func(w time.Duration) { spinWait = w }(spinWait)
	spinWait = 200 * time.Millisecond // a quick answer always comes within it, even on a loaded machine

	tried, won := spinsTried.Load(), spinsWon.Load()
	for range 5 {
		run("1 + 1")
	}
	if d, w := spinsTried.Load()-tried, spinsWon.Load()-won; d != 4 || w < 3 {
		t.Fatalf("5 quick executions on a new connection: %d spins, %d ended by the answer; want 4 (not the first) and at least 3", d, w)
	}

	spinWait = 100 * time.Millisecond // more than a quick answer takes on a loaded machine
	run("sleep")                      // 300 ms: the spin runs out, the caller sleeps
	tried = spinsTried.Load()
	run("1 + 1") // after a long answer: no spin
	if d := spinsTried.Load() - tried; d != 0 {
		t.Fatalf("the execution after a long one spun %d times, want 0", d)
	}
	run("1 + 1") // the last answer was quick: spins again
	if d := spinsTried.Load() - tried; d != 1 {
		t.Fatalf("after a quick answer again: %d spins, want 1", d)
	}

	spinWait = 0
	tried = spinsTried.Load()
	run("1 + 1")
	if d := spinsTried.Load() - tried; d != 0 {
		t.Fatalf("spinning off: %d spins", d)
	}
}

// The environment variable: a duration, 0 for off; anything else turns
// spinning off, with a line that says what to write.
func TestSpinWaitFromEnv(t *testing.T) {
	for v, want := range map[string]time.Duration{"250us": 250 * time.Microsecond, "0": 0, "fast": 0, "-1ms": 0, "1s": 0} {
		t.Setenv(SpinWaitEnv, v)
		if got := spinWaitFromEnv(); got != want {
			t.Errorf("%s=%q: %v, want %v", SpinWaitEnv, v, got, want)
		}
	}
}
