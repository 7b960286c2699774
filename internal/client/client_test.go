package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadStream(t *testing.T) {
	in := `{"type": "number_of_executions", "execution_count": 3}
{"type": "stdout", "text": "hello\n", "timestamp": "2026-08-21T10:00:00.123456Z"}
{"type": "result", "text": "2", "png": "iVBO", "is_main_result": true, "extra": {"application/x-foo": "bar"}}
{"type": "error", "name": "ValueError", "value": "bad", "traceback": ["a", "b"]}
{"type": "keepalive"}
{"type": "end_of_execution"}
`
	var got []Line
	if err := ReadStream(context.Background(), strings.NewReader(in), 1<<20, func(l Line) { got = append(got, l) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[0].ExecutionCount != 3 || got[1].Text != "hello\n" || got[1].Timestamp.IsZero() ||
		string(got[2].Data["text"]) != `"2"` || !got[2].IsMainResult || got[3].Traceback != "a\nb" {
		t.Fatalf("%+v", got)
	}
	if err := ReadStream(context.Background(), strings.NewReader(`{"type": "stdout", "text": "x"}`+"\n"), 1<<20, func(Line) {}); err == nil {
		t.Error("a stream without end_of_execution must be an error")
	}
	long := `{"type": "stdout", "text": "` + strings.Repeat("x", 2000) + `"}` + "\n"
	if err := ReadStream(context.Background(), strings.NewReader(long), 1000, func(Line) {}); !errors.Is(err, ErrProtocol) {
		t.Errorf("overlong line: %v", err)
	}
	if err := ReadStream(context.Background(), strings.NewReader("garbage\n"), 1000, func(Line) {}); !errors.Is(err, ErrProtocol) {
		t.Errorf("garbage: %v", err)
	}
}

func FuzzDecodeLine(f *testing.F) {
	f.Add([]byte(`{"type": "result", "text": "1", "extra": {}}`))
	f.Add([]byte(`{"type": "error", "traceback": ["x"]}`))
	f.Add([]byte(`{"type": "stdout", "timestamp": 1700000000000}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLine(b)
		if err == nil && l.Type == "" {
			t.Fatal("decoded a line without a type")
		}
	})
}

func FuzzReadStream(f *testing.F) {
	f.Add("{\"type\": \"stdout\", \"text\": \"a\"}\n{\"type\": \"end_of_execution\"}\n")
	f.Fuzz(func(t *testing.T, s string) {
		n := 0
		_ = ReadStream(context.Background(), strings.NewReader(s), 4096, func(Line) { n++ })
		if n > len(s) {
			t.Fatal("more lines than bytes")
		}
	})
}

// Downloads over the agent's socket ask for no compression: Go's transport
// would otherwise ask for gzip on its own, and the agent would compress
// every byte of a file only for this side to decompress it.
func TestUnixClientNoGzip(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Accept-Encoding")
		_, _ = io.WriteString(w, "data")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	c := New(Options{EnvdURL: "http://sandbox", HTTPClient: UnixHTTPClient(sock)})
	rc, err := c.ReadFile(context.Background(), "/home/user/f")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if ae := <-got; ae != "" || string(b) != "data" {
		t.Fatalf("Accept-Encoding %q, body %q: want none asked for", ae, b)
	}
}
