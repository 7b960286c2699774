package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// FuzzToolStream: the host's side of the tool-call line protocol, the
// stream of {"type": "call"|"cancel"|"keepalive", "id", "tool", "args"}
// lines an agent (hostile, if the sandbox took it over) sends to the
// program that granted the tools. Properties: Serve always returns, with
// ErrProtocol or ErrUnavailable when the stream breaks or ends, never a
// panic or a hang; the handler runs only for calls the stream carried,
// each with that line's id, tool and arguments; and only their answers are
// posted back.
func FuzzToolStream(f *testing.F) {
	for _, s := range []string{
		`{"type":"call","id":"c1","tool":"add","args":{"a":1}}` + "\n" + `{"type":"keepalive"}` + "\n",
		`{"type":"call","id":"c1","tool":"add","args":{}}` + "\n" + `{"type":"cancel","id":"c1"}` + "\n",
		`{"type":"cancel","id":"nope"}` + "\n", `{"type":"call"}`, "{\n", "\n\n  \n", `{"type":"call","id":"../x?y#z","tool":"t","args":1}`,
		strings.Repeat(`{"type":"call","id":"x","tool":"t"}`+"\n", 70),
	} {
		f.Add([]byte(s))
	}
	// Each input gets its own path prefix: an answer whose post the client
	// gave up on when Serve returned may still reach the server during a
	// later input, and must be judged against its own input's calls.
	var mu sync.Mutex
	posted := map[string][]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run, id, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/run/"), "/x/tools/calls/")
		mu.Lock()
		posted[run] = append(posted[run], id)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	f.Cleanup(srv.Close)
	var runs atomic.Int64
	f.Fuzz(func(t *testing.T, stream []byte) {
		run := fmt.Sprint(runs.Add(1))
		c := New(Options{EnvdURL: srv.URL, InterpreterURL: srv.URL + "/run/" + run})
		// The calls the stream carries, as Serve reads it: lines up to the
		// first one that does not decode.
		want := map[string]int{}
		for _, line := range bytes.Split(stream, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var l struct {
				Type string          `json:"type"`
				ID   string          `json:"id"`
				Tool string          `json:"tool"`
				Args json.RawMessage `json:"args"`
			}
			if len(line) > maxToolLine || json.Unmarshal(line, &l) != nil {
				break
			}
			if l.Type == "call" {
				want[fmt.Sprintf("%s\x00%s\x00%s", l.ID, l.Tool, l.Args)]++
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sctx, scancel := context.WithCancel(ctx)
		callCtx, cancelCall := context.WithCancel(context.WithoutCancel(ctx))
		ts := &ToolStream{c: c, body: io.NopCloser(bytes.NewReader(stream)), cancel: scancel, ctx: sctx, callCtx: callCtx, cancelCall: cancelCall}
		var hmu sync.Mutex
		got := map[string]int{}
		ids := map[string]bool{}
		err := ts.Serve(func(ctx context.Context, call ToolCall) (json.RawMessage, error) {
			hmu.Lock()
			got[fmt.Sprintf("%s\x00%s\x00%s", call.ID, call.Tool, call.Args)]++
			ids[call.ID] = true
			hmu.Unlock()
			return call.Args, nil
		})
		if ctx.Err() != nil {
			t.Fatalf("Serve ran until its deadline on %q", stream)
		}
		if err == nil || !errors.Is(err, ErrProtocol) && !errors.Is(err, sberr.ErrUnavailable) {
			t.Fatalf("Serve on a stream that ended: %v", err)
		}
		hmu.Lock()
		defer hmu.Unlock()
		for k, n := range got {
			if n > want[k] {
				t.Fatalf("handler ran %d times for %q, the stream carried it %d times", n, k, want[k])
			}
		}
		mu.Lock()
		defer mu.Unlock()
		defer delete(posted, run)
		for _, p := range posted[run] {
			found := false
			for id := range ids {
				if p == escapePath(id) {
					found = true
				}
			}
			if !found {
				t.Fatalf("answer posted to %q, no call had that id", p)
			}
		}
	})
}

func escapePath(id string) string { return url.PathEscape(id) }
