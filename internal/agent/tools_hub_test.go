package agent

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hubWithHost is a tool hub granting "echo", served by a host that answers
// every call with its arguments; cancels it receives go to cancels.
func hubWithHost(t *testing.T) (sock string, cancels chan string) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "tools", "sock")
	h := newToolHub(sock)
	st := &toolStream{out: make(chan toolCallLine, 2*MaxToolCalls), done: make(chan struct{})}
	if err := h.register([]ToolSpec{{Name: "echo"}}, st); err != nil {
		t.Fatal(err)
	}
	cancels = make(chan string, 16)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); h.close() })
	go func() {
		for {
			select {
			case <-stop:
				return
			case l := <-st.out:
				if l.Type == "cancel" {
					cancels <- l.ID
					continue
				}
				// Answer once the caller has had every chance to be
				// (wrongly) taken as gone: a cancel for this call first
				// means it was.
				select {
				case id := <-cancels:
					cancels <- id
				case <-time.After(500 * time.Millisecond):
				}
				h.mu.Lock()
				p := h.pending[l.ID]
				h.mu.Unlock()
				if p != nil {
					p.answer <- toolAnswer{Result: l.Args}
				}
			}
		}
	}()
	return sock, cancels
}

func callTool(t *testing.T, sock, request string) toolAnswer {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() { _, _ = c.Write([]byte(request)) }()
	line, err := bufio.NewReaderSize(c, 1<<20).ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	var a toolAnswer
	if err := json.Unmarshal(line, &a); err != nil {
		t.Fatalf("answer %q: %v", line, err)
	}
	return a
}

// TestToolSocketTrailingBytesAreNotAHangup: a byte after the request line
// is not the caller hanging up (before: the call was cancelled and refused
// as "the caller hung up"); a stream of them past the bound is refused.
func TestToolSocketTrailingBytesAreNotAHangup(t *testing.T) {
	sock, cancels := hubWithHost(t)
	a := callTool(t, sock, `{"tool":"echo","args":{"x":1}}`+"\n\n")
	if a.Error != nil || string(a.Result) != `{"x":1}` {
		t.Errorf("call with a trailing newline: result %s, error %v (%s)", a.Result, deref(a.Error), a.Kind)
	}
	select {
	case id := <-cancels:
		t.Errorf("the call %s was cancelled", id)
	default:
	}
	a = callTool(t, sock, `{"tool":"echo","args":{}}`+"\n"+strings.Repeat("y", maxToolTrailingBytes+10))
	if a.Error == nil || a.Kind != "refused" || !strings.Contains(*a.Error, "after its request line") {
		t.Errorf("call followed by a stream: result %s, error %v (%s), want refused", a.Result, deref(a.Error), a.Kind)
	}
}

// TestToolSocketArgsBound: the bound is on the arguments, not only on the
// line (before: arguments up to the line's slack past MaxToolArgBytes
// reached the host).
func TestToolSocketArgsBound(t *testing.T) {
	sock, _ := hubWithHost(t)
	big := strings.Repeat("a", MaxToolArgBytes)
	a := callTool(t, sock, `{"tool":"echo","args":{"a":"`+big+`"}}`+"\n")
	if a.Error == nil || a.Kind != "refused" || !strings.Contains(*a.Error, "over the limit") {
		t.Errorf("arguments of %d bytes: error %v (%s), want refused", len(big)+8, deref(a.Error), a.Kind)
	}
	small := strings.Repeat("a", 1000)
	if a := callTool(t, sock, `{"tool":"echo","args":{"a":"`+small+`"}}`+"\n"); a.Error != nil {
		t.Errorf("small arguments: %v", *a.Error)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
