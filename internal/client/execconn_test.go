package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

const oneResult = `{"type": "result", "text": "2", "is_main_result": true}` + "\n" + `{"type": "end_of_execution"}` + "\n"

// fakeAgent serves /execute, and /x/exec when lean; its lean connections
// answer one request, then close (as an agent's do when it restarts or
// the sandbox is paused), and say so on closed.
func fakeAgent(t *testing.T, lean bool) (sock string, viaHTTP *atomic.Int32, closed <-chan struct{}) {
	return fakeAgentClosing(t, lean, oneResult)
}

func fakeAgentAnswering(t *testing.T, lean bool, answer string) (string, *atomic.Int32) {
	sock, viaHTTP, _ := fakeAgentClosing(t, lean, answer)
	return sock, viaHTTP
}

func fakeAgentClosing(t *testing.T, lean bool, answer string) (string, *atomic.Int32, <-chan struct{}) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var viaHTTP atomic.Int32
	closed := make(chan struct{}, 16)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	mux := http.NewServeMux()
	mux.HandleFunc("POST /execute", func(w http.ResponseWriter, r *http.Request) {
		viaHTTP.Add(1)
		_, _ = io.WriteString(w, oneResult)
	})
	if lean {
		mux.HandleFunc("GET /x/exec", func(w http.ResponseWriter, r *http.Request) {
			conn, brw, _ := http.NewResponseController(w).Hijack()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: cs-exec\r\n\r\n")
			_ = brw.Flush()
			go func() {
				defer func() {
					conn.Close()
					select {
					case closed <- struct{}{}:
					default:
					}
				}()
				var hdr [4]byte
				if _, err := io.ReadFull(brw, hdr[:]); err != nil {
					return
				}
				if _, err := io.CopyN(io.Discard, brw, int64(binary.BigEndian.Uint32(hdr[:]))); err != nil {
					return
				}
				bw := bufio.NewWriter(conn)
				_, _ = bw.WriteString(answer)
				_ = bw.Flush()
				if !strings.HasSuffix(answer, "\n") {
					<-hold // a wedged agent: the connection stays open, silent
				}
			}()
		})
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock, &viaHTTP, closed
}

// execTwo runs three executions; with closed, each after the agent closed
// the previous one's connection (without that wait the client may take
// the idle connection before the close reaches it, a race no client can
// see: the request then meets the reset).
func execTwo(t *testing.T, sock string, closed <-chan struct{}) (dials int32) {
	var n atomic.Int32
	dial := UnixDial(sock)
	c := New(Options{EnvdURL: "http://sandbox", HTTPClient: UnixHTTPClient(sock), Dial: func(ctx context.Context) (net.Conn, error) {
		n.Add(1)
		return dial(ctx)
	}})
	for i := range 3 {
		if i > 0 && closed != nil {
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatalf("execution %d: the fake agent never closed the previous connection", i)
			}
		}
		got := ""
		if err := c.Execute(context.Background(), ExecuteRequest{Code: "1 + 1"}, func(l Line) { got = string(l.Data["text"]) }); err != nil || got != `"2"` {
			t.Fatalf("execution %d: %q, %v", i, got, err)
		}
	}
	return n.Load()
}

// An agent without /x/exec (404): the client uses /execute, and stops
// trying the upgrade.
func TestExecConnFallback(t *testing.T) {
	sock, viaHTTP, _ := fakeAgent(t, false)
	if d := execTwo(t, sock, nil); d != 1 || viaHTTP.Load() != 3 {
		t.Fatalf("%d upgrade dials, %d executions over HTTP; want 1 and 3", d, viaHTTP.Load())
	}
}

// An idle lean connection the agent closed is not used for the next
// request (which would meet EOF): a new one is dialed.
func TestExecConnStaleIdle(t *testing.T) {
	sock, viaHTTP, closed := fakeAgent(t, true)
	if d := execTwo(t, sock, closed); d != 3 || viaHTTP.Load() != 0 {
		t.Fatalf("%d dials, %d executions over HTTP; want 3 (one per closed connection) and 0", d, viaHTTP.Load())
	}
}

// A wedged agent (upgraded, then silent; or a line without end) can't hang
// Execute past StallTimeout; a line over MaxLineBytes is refused.
func TestExecConnBounded(t *testing.T) {
	for _, c := range []struct {
		name, answer string
		want         error
	}{
		{"silent", "", sberr.ErrUnavailable},
		{"overlong line", `{"type": "stdout", "text": "` + strings.Repeat("x", 5000) + `"}` + "\n", ErrProtocol},
		{"no type", `{"text": "x"}` + "\n", ErrProtocol},
	} {
		t.Run(c.name, func(t *testing.T) {
			answer := c.answer
			if answer == "" {
				answer = `{"type": "stdout", "text": "a"}` // no newline, then nothing
			}
			sock, _ := fakeAgentAnswering(t, true, answer)
			cl := New(Options{EnvdURL: "http://sandbox", HTTPClient: UnixHTTPClient(sock), Dial: UnixDial(sock),
				StallTimeout: 300 * time.Millisecond, MaxLineBytes: 4096})
			err := cl.Execute(context.Background(), ExecuteRequest{Code: "1"}, func(Line) {})
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// FuzzExecConnStream: whatever a hostile agent answers on the lean
// connection, the client returns (an error or the end) without panicking,
// and hands on no more lines than it read.
func FuzzExecConnStream(f *testing.F) {
	f.Add(oneResult)
	f.Add(`{"type": "x_request_error", "status": 404, "message": "no"}` + "\n" + `{"type": "end_of_execution"}` + "\n")
	f.Add(`{"type": "stdout", "text": "a\\"b"}` + "\n")
	f.Add(`{"type": "end_of_execution", "type": "stdout"}` + "\n")
	f.Fuzz(func(t *testing.T, answer string) {
		a, b := net.Pipe()
		defer a.Close()
		go func() {
			defer b.Close()
			var hdr [4]byte
			if _, err := io.ReadFull(b, hdr[:]); err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, b, int64(binary.BigEndian.Uint32(hdr[:]))); err != nil {
				return
			}
			_, _ = io.WriteString(b, answer)
		}()
		c := New(Options{EnvdURL: "http://sandbox", MaxLineBytes: 4096, StallTimeout: time.Second})
		n, got := 0, 0
		stream := len(answer)%2 == 0 // both ways of reading: whole lines, streamed pieces
		_ = c.roundTripConn(&execConn{c: a, br: bufio.NewReaderSize(a, 16)}, []byte(`{"code":"1"}`), stream, func(_ string, line []byte, _ int) error {
			n++
			got += len(line)
			return nil
		})
		if n > len(answer) || got > len(answer) {
			t.Fatal("more lines or bytes than were sent")
		}
	})
}

// A line longer than the connection's buffer reaches ExecuteRaw's caller
// in pieces (serve relays it without holding it whole), and Execute's as
// one line.
func TestExecConnLongLine(t *testing.T) {
	long := `{"type": "stdout", "text": "` + strings.Repeat("y", 300<<10) + `"}` + "\n"
	sock, _ := fakeAgentAnswering(t, true, long+`{"type": "end_of_execution"}`+"\n")
	c := New(Options{EnvdURL: "http://sandbox", HTTPClient: UnixHTTPClient(sock), Dial: UnixDial(sock)})
	var got strings.Builder
	pieces := 0
	if err := c.ExecuteRaw(context.Background(), []byte(`{"code":"1"}`), func(line []byte, _ int) {
		pieces++
		got.Write(line)
	}); err != nil {
		t.Fatal(err)
	}
	if got.String() != long || pieces < 2 {
		t.Fatalf("%d pieces, %d bytes; want the line (%d bytes) in pieces", pieces, got.Len(), len(long))
	}
	sock, _ = fakeAgentAnswering(t, true, long+`{"type": "end_of_execution"}`+"\n")
	c = New(Options{EnvdURL: "http://sandbox", HTTPClient: UnixHTTPClient(sock), Dial: UnixDial(sock)})
	n := 0
	if err := c.Execute(context.Background(), ExecuteRequest{Code: "1"}, func(l Line) { n += len(l.Text) }); err != nil || n != 300<<10 {
		t.Fatalf("Execute: %d bytes of text, %v", n, err)
	}
}
