//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// socketPair is a connected pair of unix stream sockets (half-close
// works on them, unlike net.Pipe).
func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "tools")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// FuzzToolRequest: the tools socket's request line, as code in the sandbox
// sends it (json {"tool", "args"} or {"list": true}, then the answer on the
// same connection). The host side is a loop that echoes each call's args as
// its result. Properties: every request gets exactly one answer line, a
// JSON object (a refusal names its kind); a call reaches the host only for
// a granted tool with a JSON object of arguments within the bound, and its
// result comes back unchanged; and nothing hangs (the call's own timeout
// bounds it).
func FuzzToolRequest(f *testing.F) {
	for _, s := range []string{
		`{"tool":"add","args":{"a":1,"b":2}}` + "\n", `{"list":true}` + "\n", `{"tool":"add"}` + "\n",
		`{"tool":"add","args":null}` + "\n", `{"tool":"add","args":[1,2]}` + "\n", `{"tool":"add","args":"x"}` + "\n",
		`{"tool":"nope","args":{}}` + "\n", `{"tool":"slow","args":{}}` + "\n", `not json` + "\n", `{"tool":"add"`,
		`{"tool":"add","args":{}}` + "\nextra", "\n", "",
	} {
		f.Add([]byte(s))
	}
	h := newToolHub("")
	h.specs = map[string]ToolSpec{"add": {Name: "add", Timeout: 2}, "slow": {Name: "slow", Timeout: 0.05}}
	st := &toolStream{out: make(chan toolCallLine, 2*MaxToolCalls), done: make(chan struct{})}
	h.stream = st
	calls := make(chan toolCallLine, 2*MaxToolCalls)
	go func() {
		for l := range st.out {
			if l.Type != "call" {
				continue
			}
			calls <- l
			if l.Tool == "slow" {
				continue // never answered: the call's timeout ends it
			}
			h.mu.Lock()
			p := h.pending[l.ID]
			h.mu.Unlock()
			if p != nil {
				p.answer <- toolAnswer{Result: l.Args}
			}
		}
	}()
	f.Fuzz(func(t *testing.T, in []byte) {
		srv, cli := socketPair(t)
		defer cli.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.serveConn(srv)
		}()
		_ = cli.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			_, _ = cli.Write(in)
			if !bytes.Contains(in, []byte("\n")) {
				_ = cli.CloseWrite() // the request ends here
			}
		}()
		line, err := bufio.NewReader(cli).ReadBytes('\n')
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("serveConn still running 5 s after %q", in)
		}
		var call *toolCallLine
		select {
		case c := <-calls:
			call = &c
		default:
		}
		if len(line) == 0 {
			// Only a request cut short (no full line) may go unanswered.
			if bytes.Contains(in, []byte("\n")) {
				t.Fatalf("no answer to %q (%v)", in, err)
			}
			if call != nil {
				t.Fatalf("a call from an incomplete request %q", in)
			}
			return
		}
		var a struct {
			toolAnswer
			Tools []ToolSpec `json:"tools"`
		}
		if err := json.Unmarshal(line, &a); err != nil {
			t.Fatalf("answer %q is not JSON: %v", line, err)
		}
		if a.Error != nil && a.Kind == "" {
			t.Fatalf("refusal without a kind: %s", line)
		}
		if call == nil {
			return
		}
		if _, granted := h.specs[call.Tool]; !granted {
			t.Fatalf("call of tool %q, not granted, reached the host", call.Tool)
		}
		var obj map[string]json.RawMessage
		if len(call.Args) > MaxToolArgBytes+64<<10 || json.Unmarshal(call.Args, &obj) != nil || obj == nil {
			t.Fatalf("call reached the host with args %.100q", call.Args)
		}
		// The same JSON value, not the same bytes: the answer's encoder
		// may escape characters (& as \u0026) that the call spelled out.
		if call.Tool == "add" && a.Error == nil && !sameJSON(a.Result, call.Args) {
			t.Fatalf("result %q came back as %q", call.Args, a.Result)
		}
	})
}

// sameJSON says whether a and b encode the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}
