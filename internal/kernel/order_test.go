package kernel

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// streamSeq is the stdout/stderr events of r as one string, each event
// prefixed by its stream: "o:a\n" or "e:b\n".
func (r run) streamSeq() string {
	var b strings.Builder
	for _, e := range r.events {
		switch e.Type {
		case EventStdout:
			b.WriteString("o:" + e.Text)
		case EventStderr:
			b.WriteString("e:" + e.Text)
		}
	}
	return b.String()
}

// TestChildOutputOrder: fd 1 and fd 2 are two pipes, so output a child
// process writes to them straight (os.system, subprocess) used to race with
// Python-level output on the other stream and with another child's output on
// the other fd: "print to stderr, then os.system('echo c')" could show c
// first. Writes the cell orders in time must arrive in that order. Each cell
// repeats the pattern so one run gives the race many chances.
func TestChildOutputOrder(t *testing.T) {
	s := newTestSession(t)
	const n = 15
	cases := []struct{ name, cell, want string }{
		{"PythonThenChild", `
import os, sys
for i in range(N):
    print('b', file=sys.stderr, flush=True)
    os.system('echo c')
`, "e:b\no:c\n"},
		{"ChildThenPython", `
import os, sys
for i in range(N):
    os.system('echo b >&2')
    print('c', flush=True)
`, "e:b\no:c\n"},
		{"TwoChildren", `
import os
for i in range(N):
    os.system('echo b >&2')
    os.system('echo c')
`, "e:b\no:c\n"},
		{"Subprocess", `
import subprocess, sys
for i in range(N):
    subprocess.run(['sh', '-c', 'echo b >&2'])
    print('c', flush=True)
    subprocess.run(['sh', '-c', 'echo b >&2'])
    subprocess.call(['echo', 'c'])
`, "e:b\no:c\ne:b\no:c\n"},
		{"ShellMagic", `
import sys
for i in range(N):
    !echo b >&2
    print('c', flush=True)
    print('b', file=sys.stderr, flush=True)
    !echo c
`, "e:b\no:c\ne:b\no:c\n"},
		{"Fork", `
import os, sys, warnings
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
for i in range(N):
    pid = os.fork()
    if pid == 0:
        os.write(2, b'b\n')
        os._exit(0)
    os.waitpid(pid, 0)
    print('c', flush=True)
`, "e:b\no:c\n"},
		{"BackgroundChild", `
import subprocess, sys, time
for i in range(N):
    p = subprocess.Popen(['sh', '-c', 'echo b >&2'])
    while p.poll() is None:
        time.sleep(0.001)
    print('c', flush=True)
`, "e:b\no:c\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := exec1(t, s, strings.ReplaceAll(c.cell, "range(N)", fmt.Sprintf("range(%d)", n)))
			if r.out.Error {
				t.Fatalf("cell failed: %q", r.stderr())
			}
			if got, want := r.streamSeq(), strings.Repeat(c.want, n); got != want {
				t.Fatalf("order:\n got %q\nwant %q", got, want)
			}
		})
	}
}

// TestMainResultWithDone: the main result goes out with the cell's done
// frame in one write (the kernel holds it back); output before it, including
// what the value's own repr prints and what a child writes to fd 1 straight,
// still comes first, and an error after it (an interrupt landing in the
// kernel's own code) still comes after it.
func TestMainResultWithDone(t *testing.T) {
	s := newTestSession(t)
	for range 20 {
		r := exec1(t, s, `
import os
class A:
    def __repr__(self):
        print("in repr", flush=True)
        return "A!"
print("before", flush=True)
os.system("echo child")
A()`)
		var seq []string
		for _, e := range r.events {
			switch {
			case e.Type == EventStdout:
				seq = append(seq, strings.Split(strings.TrimSpace(e.Text), "\n")...)
			case e.Type == EventResult && e.IsMainResult:
				seq = append(seq, "result "+str(t, e.Data["text/plain"]))
			case e.Type == EventResult || e.Type == EventError:
				seq = append(seq, e.Type)
			}
		}
		if got := strings.Join(seq, ","); got != "before,child,in repr,result A!" {
			t.Fatalf("events %s", got)
		}
	}
}

// TestFinalFrameMarkedByGo: the kernel writes no sync markers for a cell's
// final frame (done, or the main result sent with it); the pump writes them
// itself on reading the frame (frameGoMarks). Output the kernel can't see
// (fd-level writes, a child's) right before the end must still be in the
// execution, not lost after done: each cell ends in such writes on both
// streams, with and without a main result, and once with more than the
// pipe holds, so that the pump finds the pipe full and writes its marker
// only once the reader made room. A reply frame (GetVariable) is final too.
func TestFinalFrameMarkedByGo(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, "import sys\n[sys.modules[m]._st.go_marks for m in sys.modules if m.startswith('"+kernelModule()+"')]")
	if m := r.main(); m == nil || str(t, m.Data["text/plain"]) != "[True]" {
		t.Fatalf("the kernel does not leave the final markers to Go: %+v", r.events)
	}
	for i := range 60 {
		tail := ""
		if i%2 == 1 {
			tail = "\n42"
		}
		r := exec1(t, s, fmt.Sprintf("import os\nos.write(1, b'o%d')\nos.write(2, b'e%d')\n_ = os.system('printf c%d')%s", i, i, i, tail))
		if got, want := r.stdout(), fmt.Sprintf("o%dc%d", i, i); got != want {
			t.Fatalf("cell %d: stdout %q, want %q (events %+v)", i, got, want, r.events)
		}
		if got, want := r.stderr(), fmt.Sprintf("e%d", i); got != want {
			t.Fatalf("cell %d: stderr %q, want %q", i, got, want)
		}
		if (i%2 == 1) != (r.main() != nil) {
			t.Fatalf("cell %d: main result %v", i, r.main())
		}
	}
	const big = 3 * pipeSize
	r = exec1(t, s, fmt.Sprintf("import os\nb = b'x' * %d\nn = 0\nwhile n < len(b): n += os.write(1, b[n:])\nos.write(2, b'end')", big))
	if n := len(r.stdout()); n != big || r.stderr() != "end" {
		t.Fatalf("full pipe: %d bytes of stdout, want %d; stderr %q", n, big, r.stderr())
	}
	exec1(t, s, "import os\nv = 7\nos.write(1, b'before get')")
	if v, _, err := s.GetVariable(context.Background(), "v"); err != nil || string(v) != "7" {
		t.Fatalf("GetVariable: %s %v", v, err)
	}
}
