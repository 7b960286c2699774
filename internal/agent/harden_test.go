package agent_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHugeTimeouts: a timeout of 1e300 seconds (or any past what a
// time.Duration holds) means "very long", not an overflow into the past: it
// neither ends the sandbox (/x/timeout) nor times the execution out at once
// (/execute).
func TestHugeTimeouts(t *testing.T) {
	a := startAgent(t, "")
	for _, secs := range []string{"1e300", "9223372037", "1.7976931348623157e308"} {
		code, body, _ := a.raw(t, "POST", "/execute", `{"code": "print('ran')", "timeout": `+secs+`}`, nil)
		if code != 200 || !strings.Contains(body, `"ran\n"`) || strings.Contains(body, "Timeout") {
			t.Fatalf("execute with timeout %s: %d %s", secs, code, body)
		}
		code, body, _ = a.raw(t, "POST", "/x/timeout", `{"timeout": `+secs+`}`, nil)
		if code != 200 {
			t.Fatalf("timeout %s: %d %s", secs, code, body)
		}
		time.Sleep(300 * time.Millisecond) // the lifetime watcher would end the agent now
		if err := a.c.Health(ctx(t)); err != nil {
			t.Fatalf("after a timeout of %s seconds the agent is gone: %v", secs, err)
		}
	}
}

// TestSandboxAgentSeccomp: as a sandbox's init (--sandbox, how the
// kubernetes variant runs it) the agent installs the local variant's
// seccomp filter on itself before serving, so user code it starts runs
// under it whatever the pod's runtime profile allows.
func TestSandboxAgentSeccomp(t *testing.T) {
	a := startAgent(t, "tok-en", "--sandbox")
	st, err := os.ReadFile("/proc/" + strconv.Itoa(a.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(st), "Seccomp:\t2") || !strings.Contains(string(st), "NoNewPrivs:\t1") {
		t.Fatalf("the sandbox agent runs without the seccomp filter:\n%s", st)
	}
	ex := a.raw
	code, body, _ := ex(t, "POST", "/execute", `{"code": "import socket\ntry:\n    socket.socket(40, socket.SOCK_STREAM); print('vsock ALLOWED')\nexcept OSError as e:\n    print('vsock refused', e.errno)"}`, nil)
	if code != 200 || !strings.Contains(body, "vsock refused") {
		t.Fatalf("user code under the agent: %d %s", code, body)
	}
}
