package kernel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func (r run) chunks(typ string) []string {
	var c []string
	for _, e := range r.events {
		if e.Type == typ {
			c = append(c, e.Text)
		}
	}
	return c
}

// TestPrintIsOneEvent: print writes its text and its newline separately; the
// kernel's line buffering makes them one event, as Jupyter/E2B send them.
func TestPrintIsOneEvent(t *testing.T) {
	s := newTestSession(t)
	exec1(t, s, "import sys")
	r := exec1(t, s, "print('hi')")
	if c := r.chunks(EventStdout); !slices.Equal(c, []string{"hi\n"}) {
		t.Fatalf("print('hi'): stdout events %q", c)
	}
	r = exec1(t, s, "print('e', 1, file=sys.stderr)")
	if c := r.chunks(EventStderr); !slices.Equal(c, []string{"e 1\n"}) {
		t.Fatalf("stderr events %q", c)
	}
	r = exec1(t, s, "print('a'); print('b')")
	c := r.chunks(EventStdout)
	if strings.Join(c, "") != "a\nb\n" || slices.Contains(c, "\n") {
		t.Fatalf("print('a'); print('b'): stdout events %q", c)
	}
	// A partial line is written before a frame and at the end of the cell.
	r = exec1(t, s, "print('x', end='')\ndisplay(1)\nprint('y', end='')")
	var seq []string
	for _, e := range r.events {
		switch e.Type {
		case EventStdout:
			seq = append(seq, e.Text)
		case EventResult:
			seq = append(seq, "<"+str(t, e.Data["text/plain"])+">")
		}
	}
	if !slices.Equal(seq, []string{"x", "<1>", "y"}) {
		t.Fatalf("partial lines around display: %q", seq)
	}
	// Many lines in one cell: whole lines only, no lone newlines.
	r = exec1(t, s, "for i in range(1000): print(i)")
	var want strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if r.stdout() != want.String() {
		t.Fatalf("1000 prints: %d bytes, want %d", len(r.stdout()), want.Len())
	}
	for _, c := range r.chunks(EventStdout) {
		if !strings.HasSuffix(c, "\n") || strings.HasPrefix(c, "\n") {
			t.Fatalf("chunk %q is not whole lines", c)
		}
	}
}

// TestPartialLineBeforeChild: a pending partial line is written before a
// child process starts (os.system, subprocess, fork), so the order holds
// without an explicit flush, and a forked child does not print it again.
func TestPartialLineBeforeChild(t *testing.T) {
	s := newTestSession(t)
	// Python 3.12+ warns when forking with threads; the kernel's flusher
	// thread lives for 50 ms after a partial line, as here.
	r := exec1(t, s, `
import os, sys, subprocess, warnings
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
print("a", end="")
os.system("echo b")
print("c", end="")
subprocess.run(["echo", "d"])
print("e", end="")
pid = os.fork()
if pid == 0:
    print("f")
    os._exit(0)
os.waitpid(pid, 0)
print("g", end="", file=sys.stderr)
os.system("echo h >&2")
print("i")
`)
	if r.stdout() != "ab\ncd\nef\ni\n" || r.stderr() != "gh\n" || len(r.errors()) > 0 {
		t.Fatalf("stdout %q stderr %q %+v", r.stdout(), r.stderr(), r.errors())
	}
}

// TestThreadsPrinting: user threads writing concurrently with the main
// thread never lose, cut or garble a whole-line write; partial writes from
// several threads may interleave (as in CPython) but no byte is lost.
func TestThreadsPrinting(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, `
import sys, threading
def work(n):
    for j in range(300):
        sys.stdout.write("t%d-%d %s\n" % (n, j, "x" * (j % 50)))
ts = [threading.Thread(target=work, args=(n,)) for n in range(4)]
for t in ts: t.start()
for j in range(300): sys.stderr.write("m-%d\n" % j)
for t in ts: t.join()
`)
	lines := strings.Split(strings.TrimSuffix(r.stdout(), "\n"), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	for n := range 4 {
		for j := range 300 {
			if l := fmt.Sprintf("t%d-%d %s", n, j, strings.Repeat("x", j%50)); !seen[l] {
				t.Fatalf("line %q missing or garbled", l)
			}
		}
	}
	if len(lines) != 4*300 || len(r.errors()) > 0 {
		t.Fatalf("%d stdout lines, errors %+v", len(lines), r.errors())
	}
	if strings.Count(r.stderr(), "\n") != 300 {
		t.Fatalf("stderr: %q", r.stderr()[:min(100, len(r.stderr()))])
	}
	r = exec1(t, s, `
def part(c):
    for j in range(2000):
        print(c, end="" if j % 10 else "\n")
ts = [threading.Thread(target=part, args=(c,)) for c in "abc"]
for t in ts: t.start()
for t in ts: t.join()
`)
	for _, c := range "abc" {
		if n := strings.Count(r.stdout(), string(c)); n != 2000 {
			t.Fatalf("%c: %d bytes, want 2000", c, n)
		}
	}
}

// TestPartialLineIsLive: a partial line shows up within ~100 ms even though
// the cell keeps running and writes nothing else.
func TestPartialLineIsLive(t *testing.T) {
	s := newTestSession(t)
	exec1(t, s, "import time, sys")
	start := time.Now()
	var at []time.Duration
	var texts []string
	_, err := s.Execute(context.Background(), Request{Code: "print('a', end='')\ntime.sleep(0.5)\nsys.stderr.write('b')\ntime.sleep(0.5)"}, func(e Event) {
		if e.Type == EventStdout || e.Type == EventStderr {
			at = append(at, time.Since(start))
			texts = append(texts, e.Text)
		}
	})
	total := time.Since(start)
	if err != nil || !slices.Equal(texts, []string{"a", "b"}) {
		t.Fatalf("%v %q", err, texts)
	}
	// Measured against the cell's own sleeps, not the clock from the
	// start (a busy host delays everything alike): each piece arrives
	// well before what the cell does half a second after it.
	const gap = 250 * time.Millisecond
	if at[1]-at[0] < gap || total-at[1] < gap {
		t.Fatalf("not live: arrived after %v and %v, the cell ended after %v", at[0], at[1], total)
	}
	t.Logf("partial lines arrived after %v and %v, the cell ended after %v", at[0], at[1], total)
}

// TestInterruptWhilePrinting: SIGINT landing anywhere in the buffered write
// path (including mid-flush and mid-sync-frame) interrupts the cell without
// breaking the protocol or leaving the output lock held.
func TestInterruptWhilePrinting(t *testing.T) {
	s := newTestSession(t)
	for i, code := range []string{
		"import sys\nwhile True: print('x' * 100)",
		"import sys\nwhile True:\n    print('o', end='')\n    print('e', end='', file=sys.stderr)",
		"import sys\nwhile True: sys.stdout.write('y' * 70000)",
	} {
		var r run
		n := 0
		r.out, r.err = s.Execute(context.Background(), Request{Code: code}, func(e Event) {
			r.events = append(r.events, e)
			if n++; n == 50 {
				go func() {
					time.Sleep(time.Duration(i) * 3 * time.Millisecond)
					s.Interrupt()
				}()
			}
		})
		errs := r.errors()
		if r.err != nil || r.out.KernelDied || len(errs) != 1 || errs[0].Name != "KeyboardInterrupt" {
			t.Fatalf("%q: %v %+v %+v", code, r.err, r.out, errs)
		}
		if r := exec1(t, s, "print('after')"); r.stdout() != "after\n" {
			t.Fatalf("after interrupt: %+v", r.events)
		}
	}
}
