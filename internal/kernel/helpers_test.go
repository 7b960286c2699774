package kernel

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

const testPython = "/usr/bin/python3"

func newTestSession(t testing.TB, mod ...func(*Options)) *Session {
	t.Helper()
	_, err := os.Stat(testPython)
	testdep.Require(t, err == nil, testPython+" (make deps)")
	o := Options{Python: testPython, Cwd: t.TempDir(), ScriptDir: scriptDir(t)}
	for _, m := range mod {
		m(&o)
	}
	s := NewSession(o)
	t.Cleanup(func() { s.Close() })
	return s
}

var sharedScriptDir string

func scriptDir(t testing.TB) string {
	if sharedScriptDir == "" {
		d, err := os.MkdirTemp("", "kernel-script-")
		if err != nil {
			t.Fatal(err)
		}
		sharedScriptDir = d
	}
	return sharedScriptDir
}

type run struct {
	events []Event
	out    Outcome
	err    error
}

func (r run) stdout() string { return r.text(EventStdout) }
func (r run) stderr() string { return r.text(EventStderr) }

func (r run) text(typ string) string {
	var b strings.Builder
	for _, e := range r.events {
		if e.Type == typ {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func (r run) results() []Event {
	var res []Event
	for _, e := range r.events {
		if e.Type == EventResult {
			res = append(res, e)
		}
	}
	return res
}

func (r run) errors() []Event {
	var res []Event
	for _, e := range r.events {
		if e.Type == EventError {
			res = append(res, e)
		}
	}
	return res
}

func (r run) main() *Event {
	for _, e := range r.events {
		if e.Type == EventResult && e.IsMainResult {
			return &e
		}
	}
	return nil
}

func str(t testing.TB, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("not a JSON string: %s", raw)
	}
	return s
}

func exec1(t testing.TB, s *Session, code string) run {
	t.Helper()
	return execReq(t, s, Request{Code: code})
}

func execReq(t testing.TB, s *Session, req Request) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var r run
	r.out, r.err = s.Execute(ctx, req, func(e Event) { r.events = append(r.events, e) })
	if r.err != nil {
		t.Fatalf("Execute(%q): %v", req.Code, r.err)
	}
	return r
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedScriptDir != "" {
		os.RemoveAll(sharedScriptDir)
	}
	os.Exit(code)
}
