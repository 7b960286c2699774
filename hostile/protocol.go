// Attacks on the execution protocol: forged ends of an execution, cells that never end, output floods.

package hostile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

func (c *suite) fakeEnd(t *testing.T) {
	sb := c.victim
	// A fake end-of-execution line in stdout, on the raw fd, a forged
	// sync marker, and garbage on the kernel's event fd: none may end the
	// execution early or move output to another execution.
	var lines []string
	ex := py(t, sb, `import os, sys
print('{"type": "end_of_execution"}')
os.write(1, b'\n{"type": "end_of_execution"}\n{"type": "stdout", "text": "forged"}\n')
os.write(1, b'\x1eforgedtoken:1\x1f')
sys.stdout.flush()
print('after-fake')
'result'`, sandboxes.OnStdout(func(m sandboxes.OutputMessage) { lines = append(lines, m.Line) }))
	s := ex.Stdout()
	if !strings.Contains(s, `{"type": "end_of_execution"}`) || !strings.Contains(s, "after-fake") || ex.Text() != "result" {
		t.Fatalf("a fake end-of-execution line changed the execution: stdout %q, result %q, error %v", s, ex.Text(), ex.Error)
	}
	if ex2 := py(t, sb, "print('next')"); ex2.Stdout() != "next\n" {
		t.Fatalf("output leaked into the next execution: %q", ex2.Stdout())
	}
	// Garbage on the kernel's event channel (fd 4) and command channel.
	ex = py(t, sb, `import os
n = 0
for fd in (3, 4, 5, 6):
    try:
        os.write(fd, b'\xfeK\x00\x00\x00\x20{"t":"done","e":99,"id":1}      garbage')
        n += 1
    except OSError:
        pass
print('wrote', n)`)
	what := "kernel unaffected"
	if ex.Error != nil {
		what = "kernel reported " + ex.Error.Name + ": " + firstLine(ex.Error.Value)
	}
	ex2, err := sb.RunCode(ctxT(t, 30*time.Second), "print('clean')")
	if err != nil || ex2.Stdout() != "clean\n" {
		t.Fatalf("after forging kernel frames: %v %+v", err, ex2)
	}
	record(t, "fake NDJSON end lines and forged markers came back as plain stdout; forged kernel frames: %s; next execution clean", what)
}

func (c *suite) neverEnds(t *testing.T) {
	sb := c.victim
	start := time.Now()
	ex := py(t, sb, "while True: pass", sandboxes.WithTimeout(2*time.Second))
	d1 := time.Since(start)
	if !ex.TimedOut || d1 > 20*time.Second {
		t.Fatalf("busy loop with a 2s timeout: timed out %v after %s (%v)", ex.TimedOut, d1, ex.Error)
	}
	// Ignores SIGINT: the kernel must be killed, and reported.
	start = time.Now()
	ex = py(t, sb, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    try:\n        pass\n    except BaseException:\n        pass", sandboxes.WithTimeout(2*time.Second))
	d2 := time.Since(start)
	if !ex.TimedOut || d2 > 30*time.Second {
		t.Fatalf("SIGINT-proof loop: timed out %v after %s (%v)", ex.TimedOut, d2, ex.Error)
	}
	alive(t, sb, "a SIGINT-proof loop")
	// The caller gives up (context deadline): RunCode returns, the sandbox
	// interrupts the orphaned execution and answers the next one.
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := sb.RunCode(ctx, "import time\ntime.sleep(10**9)")
	cancel()
	d3 := time.Since(start)
	if err == nil || d3 > 10*time.Second {
		t.Fatalf("RunCode under a 2s context deadline returned %v after %s", err, d3)
	}
	start = time.Now()
	alive(t, sb, "an abandoned execution")
	d4 := time.Since(start)
	record(t, "busy loop stopped in %s, SIGINT-proof loop killed in %s, abandoned sleep returned in %s and the next execution ran %s later", d1.Round(time.Millisecond), d2.Round(time.Millisecond), d3.Round(time.Millisecond), d4.Round(time.Millisecond))
}

func (c *suite) floodStdout(t *testing.T) {
	sb := c.victim
	start := time.Now()
	ex := py(t, sb, "import sys\nchunk = 'x' * 1023 + '\\n'\nfor i in range(200 * 1024):\n    sys.stdout.write(chunk)", sandboxes.WithTimeout(2*time.Minute))
	d := time.Since(start)
	got := len(ex.Stdout())
	if got > 20<<20 || !strings.Contains(ex.Stdout()+ex.Stderr(), "truncated") {
		t.Fatalf("200 MiB of stdout: client kept %d bytes, truncation marker %v", got, strings.Contains(ex.Stdout()+ex.Stderr(), "truncated"))
	}
	// fd-level flood from a child process.
	start2 := time.Now()
	ex2 := py(t, sb, "import os\nos.system('head -c 300000000 /dev/zero | tr \"\\\\0\" y')", sandboxes.WithTimeout(2*time.Minute))
	d2 := time.Since(start2)
	if len(ex2.Stdout()) > 20<<20 {
		t.Fatalf("fd-level flood: client kept %d bytes", len(ex2.Stdout()))
	}
	alive(t, sb, "a stdout flood")
	record(t, "200 MiB of print: %d MiB kept + marker, %s; 300 MB from a child: %d MiB kept, %s", got>>20, d.Round(time.Millisecond), len(ex2.Stdout())>>20, d2.Round(time.Millisecond))
}

func (c *suite) floodDisplay(t *testing.T) {
	sb := c.victim
	start := time.Now()
	ex := py(t, sb, `class Big:
    def _repr_html_(self): return 'h' * (40 << 20)
display(Big())
class Mid:
    def _repr_html_(self): return 'm' * (1 << 20)
for i in range(64):
    display(Mid())
'done'`, sandboxes.WithTimeout(2*time.Minute))
	d := time.Since(start)
	total := 0
	for _, r := range ex.Results {
		total += len(r.HTML())
		if len(r.HTML()) > 32<<20 {
			t.Fatalf("a 40 MiB display payload came through (%d bytes)", len(r.HTML()))
		}
	}
	if ex.Text() != "done" {
		t.Errorf("display flood lost the main result: %q %v", ex.Text(), ex.Error)
	}
	alive(t, sb, "a display flood")
	record(t, "40 MiB display dropped; 64 x 1 MiB displays: %d results, %d MiB total, %s", len(ex.Results), total>>20, d.Round(time.Millisecond))
}

// forgedEndRealToken: user code runs in the kernel's process, so it can
// reach the kernel's own protocol (its token, its event fd, its send
// function) and forge anything about its own execution: a result, an
// early end. What it must not do is reach past it: the real rest of the
// cell (printed after the forged end) must not show up in the next
// execution, and another context must be unaffected. SECURITY.md says so.
func (c *suite) forgedEndRealToken(t *testing.T) {
	sb := c.create(t, nil)
	other, err := sb.CreateContext(ctxT(t, time.Minute), sandboxes.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ex := py(t, sb, "kept = 'other-state'", sandboxes.InContext(other)); ex.Error != nil {
		t.Fatal(ex.Error.Value)
	}
	ex := py(t, sb, `import sys, time
f = sys._getframe()
while f is not None and f.f_code.co_name != '_cmd_exec':
    f = f.f_back
cid, send, st = f.f_locals['cid'], f.f_globals['_send'], f.f_globals['_st']
print('token-len', len(st.token), flush=True)
send({"t": "display", "main": True, "data": {"text/plain": "'forged-result'"}, "md": {}})
send({"t": "done", "id": cid, "exit": 0})
time.sleep(0.5)
print('after-forged-done', flush=True)
'real-result'`)
	first := fmt.Sprintf("stdout %q, result %q, error %v", ex.Stdout(), ex.Text(), ex.Error)
	if !strings.Contains(ex.Stdout(), "token-len") {
		t.Fatalf("the probe did not reach the kernel's protocol: %s", first)
	}
	time.Sleep(time.Second)
	next, err := sb.RunCode(ctxT(t, time.Minute), "print('next')")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(next.Stdout(), "after-forged-done") || strings.Contains(next.Text(), "real-result") {
		t.Fatalf("the forged end moved the rest of a cell into the next execution: %q %q", next.Stdout(), next.Text())
	}
	nextWhat := "clean"
	if next.Error != nil {
		nextWhat = next.Error.Name
	} else if next.Stdout() != "next\n" {
		t.Fatalf("next execution: %q", next.Stdout())
	}
	o := py(t, sb, "print(kept)", sandboxes.InContext(other))
	if out(o) != "other-state" {
		t.Fatalf("the other context was affected: %q %v", o.Stdout(), o.Error)
	}
	alive(t, sb, "a forged end with the real token")
	record(t, "forged with the kernel's real token: the execution saw %s; the next execution: %s; another context unaffected", first, nextWhat)
}
