package agent_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// leanClient is a client of a that executes over the lean execution
// connection (GET /x/exec), counting the connections it dials. It has no
// HTTP: a fall back to /execute fails.
func leanClient(a *agentProc, token string, dials *atomic.Int32) *client.Client {
	dial := client.UnixDial(a.sock)
	noHTTP := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, errors.New("this test's client has no HTTP: executions must use the lean connection")
	})}
	return client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: noHTTP, AccessToken: token,
		Dial: func(ctx context.Context) (net.Conn, error) {
			dials.Add(1)
			return dial(ctx)
		}})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func execText(t *testing.T, c *client.Client, req client.ExecuteRequest) (string, error) {
	t.Helper()
	text := ""
	err := c.Execute(ctx(t), req, func(l client.Line) {
		if l.Type == "result" {
			_ = json.Unmarshal(l.Data["text"], &text)
		}
	})
	return text, err
}

// The lean connection answers what /execute answers, on one connection
// kept between executions, refusals included.
func TestExecConn(t *testing.T) {
	a := startAgent(t, "tok")
	var dials atomic.Int32
	c := leanClient(a, "tok", &dials)
	if _, err := execText(t, c, client.ExecuteRequest{Code: "x = 40"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got, err := execText(t, c, client.ExecuteRequest{Code: "x + 2"}); err != nil || got != "42" {
			t.Fatalf("x + 2 = %q, %v", got, err)
		}
	}
	var lines []string
	if err := c.Execute(ctx(t), client.ExecuteRequest{Code: "print('out')\n1/0"}, func(l client.Line) { lines = append(lines, l.Type) }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(lines, ",") != "number_of_executions,stdout,error" {
		t.Fatalf("lines %v", lines)
	}
	missing := "nope"
	_, err := execText(t, c, client.ExecuteRequest{Code: "1", ContextID: missing})
	if !errors.Is(err, sberr.ErrNotFound) || !strings.Contains(err.Error(), "Context nope not found") {
		t.Fatalf("unknown context: %v", err)
	}
	if got, err := execText(t, c, client.ExecuteRequest{Code: "x"}); err != nil || got != "40" {
		t.Fatalf("after a refusal: %q, %v", got, err)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections dialed for 7 executions, want 1", n)
	}
	// The token is checked on the upgrade.
	var d2 atomic.Int32
	if _, err := execText(t, leanClient(a, "wrong", &d2), client.ExecuteRequest{Code: "1"}); !errors.Is(err, sberr.ErrUnauthorized) {
		t.Fatalf("wrong token: %v", err)
	}
}

// Hostile framing: a length over the 8 MiB bound ends the connection
// without the agent reading (or allocating) it; an upgrade without the
// token is refused.
func TestExecConnBounds(t *testing.T) {
	a := startAgent(t, "tok")
	open := func(token string) (net.Conn, int) {
		conn, err := net.Dial("unix", a.sock)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "http://sandbox/x/exec", nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "cs-exec")
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _ := conn.Read(buf)
		var status int
		if f := strings.Fields(string(buf[:n])); len(f) > 1 {
			status = atoi(f[1])
		}
		return conn, status
	}
	if c, st := open(""); st != http.StatusUnauthorized {
		t.Fatalf("upgrade without the token: %d", st)
	} else {
		c.Close()
	}
	conn, st := open("tok")
	defer conn.Close()
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d", st)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 0xFFFFFFFF)
	conn.Write(hdr[:])
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(make([]byte, 64)); err != io.EOF {
		t.Fatalf("a 4 GiB frame: read %d, %v; want the connection closed", n, err)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// A caller that gives up (its context ends) interrupts its cell, as a
// client leaving /execute does: the context stays usable, the rest of the
// cell never ran.
func TestExecConnCancelInterrupts(t *testing.T) {
	a := startAgent(t, "")
	var dials atomic.Int32
	c := leanClient(a, "", &dials)
	cctx, cancel := context.WithCancel(ctx(t))
	started := make(chan struct{}, 1)
	go func() {
		<-started
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	err := c.Execute(cctx, client.ExecuteRequest{Code: "import time\nprint('go', flush=True)\nfor _ in range(600): time.sleep(0.1)\nflag = 1"}, func(l client.Line) {
		if l.Type == "stdout" {
			select {
			case started <- struct{}{}:
			default:
			}
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled execution: %v", err)
	}
	if got, err := execText(t, c, client.ExecuteRequest{Code: "'flag' in globals()"}); err != nil || got != "False" {
		t.Fatalf("after the cancel: %q, %v (want the cell interrupted)", got, err)
	}
}

// A client that sends its first request in the same write as the upgrade,
// before the 101: the bytes the upgrade's reader buffered are the start of
// the request, not lost when the connection switches to raw reads.
func TestExecConnPipelined(t *testing.T) {
	a := startAgent(t, "tok")
	conn, err := net.Dial("unix", a.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := []byte(`{"code":"6 * 7"}`)
	msg := "GET /x/exec HTTP/1.1\r\nHost: sandbox\r\nConnection: Upgrade\r\nUpgrade: cs-exec\r\nX-Access-Token: tok\r\n\r\n"
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
	if _, err := conn.Write(append(append([]byte(msg), hdr[:]...), body...)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var got []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(got), "end_of_execution") && len(got) < 1<<20 {
		n, err := conn.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	if !strings.Contains(string(got), "101 Switching Protocols") || !strings.Contains(string(got), `"42"`) ||
		!strings.Contains(string(got), "end_of_execution") {
		t.Fatalf("pipelined request: %q", got)
	}
}
