package e2bserver

import (
	"strings"
	"testing"
	"time"
)

// TestSandboxLogBounded: a start command's output becomes log lines, split
// on newlines across chunks, each line and the whole log bounded however
// much the command writes.
func TestSandboxLogBounded(t *testing.T) {
	var l sandboxLog
	w := l.writer("stdout")
	w([]byte("hel"))
	w([]byte("lo\nwor"))
	w([]byte("ld\n"))
	got := l.since(time.Time{}, 10)
	if len(got) != 2 || got[0].Message != "hello" || got[1].Message != "world" || got[0].Fields["stream"] != "stdout" {
		t.Fatalf("lines: %+v", got)
	}
	w([]byte(strings.Repeat("x", 3*maxSandboxLogLine))) // a line that never ends
	for i := 0; i < 2*maxSandboxLogEntries; i++ {
		w([]byte("line\n"))
	}
	all := l.since(time.Time{}, 10*maxSandboxLogEntries)
	if len(all) != maxSandboxLogEntries {
		t.Errorf("entries: %d, want the newest %d", len(all), maxSandboxLogEntries)
	}
	for _, e := range all {
		if len(e.Message) > maxSandboxLogLine+len("…") {
			t.Errorf("a line of %d bytes", len(e.Message))
		}
	}
	if n := len(l.since(time.Time{}, 5)); n != 5 {
		t.Errorf("limit 5: %d", n)
	}
	var none *sandboxLog
	if got := none.since(time.Time{}, 10); got == nil || len(got) != 0 {
		t.Errorf("a sandbox without a start command: %v", got)
	}
}
