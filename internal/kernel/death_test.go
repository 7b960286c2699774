package kernel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// guard runs f and fails the test (with every goroutine's stack) instead of
// hanging the suite when f does not return within d.
func guard(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%s did not return within %v (hang):\n%s", what, d, buf)
	}
}

// fakeDeadKernel is a kproc whose process is gone: dead is set, and done is
// closed or not (the pump's last steps are: set dead, deliver itemDead to
// the sink attached at that moment, close done).
func fakeDeadKernel(closeDone bool) *kproc {
	k := &kproc{done: make(chan struct{}), exited: make(chan struct{}), killed: make(chan struct{})}
	k.dead = &death{reason: "fake death"}
	if closeDone {
		close(k.done)
	}
	return k
}

// TestWaitOnDeadKernelIsBounded covers the race behind the hang: the kernel
// died and its itemDead went to the previous execution's sink (or none), and
// the next command attached a new sink to the same kproc before the session
// noticed. Before the fix that sink never received anything and the wait —
// even a cancelled one, as kill() on a dead kernel does nothing — never ended.
func TestWaitOnDeadKernelIsBounded(t *testing.T) {
	for _, closeDone := range []bool{false, true} {
		k := fakeDeadKernel(closeDone)
		s := NewSession(Options{KillGrace: 50 * time.Millisecond})
		sk := k.attach()
		w := &waiter{s: s, k: k, sk: sk, id: 1, emit: func(Event) {}, maxOut: 1 << 20, exec: true}
		guard(t, 5*time.Second, fmt.Sprintf("wait (done closed: %v)", closeDone), func() {
			if res := w.wait(context.Background()); res.dead == nil || res.dead.reason != "fake death" {
				t.Errorf("wait returned %+v, want the death", res)
			}
		})
		k.detach(sk)
	}
	// Death not delivered to this sink at all (attached before dead was set,
	// never handed the item): done closing must end the wait, after the
	// items that were delivered.
	k := &kproc{done: make(chan struct{}), exited: make(chan struct{}), killed: make(chan struct{})}
	sk := k.attach()
	k.deliver(item{kind: itemText, stream: 1, text: []byte("last words")})
	k.sinkMu.Lock()
	k.dead = &death{reason: "gone"}
	k.sinkMu.Unlock()
	close(k.done)
	var got []Event
	w := &waiter{s: NewSession(Options{}), k: k, sk: sk, id: 1, emit: func(e Event) { got = append(got, e) }, maxOut: 1 << 20, exec: true}
	guard(t, 5*time.Second, "wait (death never delivered)", func() {
		if res := w.wait(context.Background()); res.dead == nil || res.dead.reason != "gone" {
			t.Errorf("wait returned %+v", res)
		}
	})
	if len(got) != 1 || got[0].Text != "last words" {
		t.Fatalf("output before death: %+v", got)
	}
}

// evtFrame is Python source for the bytes of one forged event frame.
func evtFrame(payload string) string {
	var b bytes.Buffer
	b.Write(frameMagic[:])
	binary.Write(&b, binary.BigEndian, uint32(len(payload)))
	b.WriteString(payload)
	return fmt.Sprintf("%q", b.String())
}

// TestRepeatedKernelDeathsNeverHang: consecutive executions whose kernels
// each die — by protocol violation or exit — at a different point: right
// after start, between frames, while Go waits for a frame's sync markers,
// mid-frame, with the kernel moved out of its process group. Every Execute
// and every variable access must return (KernelDied), and the session must
// recover afterwards.
func TestRepeatedKernelDeathsNeverHang(t *testing.T) {
	_, err := os.Stat(testPython)
	testdep.Require(t, err == nil, testPython+" (make deps)")
	s := NewSession(Options{Python: testPython, Cwd: t.TempDir(), ScriptDir: scriptDir(t), KillGrace: 500 * time.Millisecond})
	t.Cleanup(func() {
		// Close waits for the kernel to be reaped: bounded too.
		guard(t, 15*time.Second, "Close", func() { s.Close() })
	})
	deaths := []struct{ name, code string }{
		{"garbage right after start", "import os\nos.write(4, b'garbage garbage')"},
		{"exit right after start", "import os\nos._exit(3)"},
		{"unknown frame type", "import os\nos.write(4, b" + evtFrame(`{"t":"zz"}`) + ")"},
		{"exit between frames", "import os\nprint('a')\ndisplay(1)\nprint('b', end='')\nos._exit(0)"},
		{"violation between frames", "import os, sys\nprint('a')\ndisplay(1)\nsys.stderr.write('e')\nos.write(4, b'\\xfeK\\x00')\nos._exit(0)"},
		{"exit while Go waits for markers", "import os\nos.write(4, b" + evtFrame(`{"e":999999,"m":3,"t":"sync"}`) + ")\nos._exit(1)"},
		{"forged display then garbage", "import os\nos.write(4, b" + evtFrame(`{"e":999999,"m":3,"t":"display","data":{"text/plain":"\"x\""}}`) + " + b'zz')"},
		{"half a frame header then exit", "import os\nprint('x', end='')\nos.write(4, b'\\xfeK\\x00\\x00')\nos._exit(0)"},
		{"frame body cut short", "import os\nos.write(4, b'\\xfeK\\x00\\x00\\x01\\x00{')\nos._exit(0)"},
		{"SIGKILL self", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"},
		{"fd 4 closed", "import os\nos.close(4)\nprint('closed')"},
		{"escaped its process group, then garbage",
			"import os, subprocess\np = subprocess.Popen(['sleep', '2'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=lambda: os.setpgid(0, 0))\n" +
				"os.setpgid(0, p.pid)\nos.write(4, b'garbage')\nimport time\ntime.sleep(30)"},
	}
	const rounds = 24
	for i := range rounds {
		d := deaths[i%len(deaths)]
		var r run
		start := time.Now()
		guard(t, 15*time.Second, fmt.Sprintf("execution %d (%s)", i, d.name), func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r.out, r.err = s.Execute(ctx, Request{Code: d.code}, func(e Event) { r.events = append(r.events, e) })
		})
		errs := r.errors()
		if r.err != nil || !r.out.KernelDied || len(errs) != 1 || errs[0].Name != "KernelDied" {
			t.Fatalf("execution %d (%s): %v %+v %+v", i, d.name, r.err, r.out, r.events)
		}
		if i > 0 && !strings.Contains(r.stderr(), "[kernel restarted") {
			t.Fatalf("execution %d (%s): no restart note: %+v", i, d.name, r.events)
		}
		t.Logf("%2d %-40s %6v  %s", i, d.name, time.Since(start).Round(time.Millisecond), errs[0].Value)
		if i%4 == 3 {
			// Variable access right after a death is bounded too.
			guard(t, 15*time.Second, "GetVariable after a death", func() {
				s.GetVariable(context.Background(), "x")
			})
		}
	}
	guard(t, 15*time.Second, "execution after the deaths", func() {
		if r := exec1(t, s, "print('ok')\n1 + 1"); r.main() == nil || r.stdout() != "ok\n" || len(r.errors()) != 0 {
			t.Errorf("session did not recover: %+v", r.events)
		}
	})
}

// TestProcessGone: the check every execution makes of its kernel (one
// waitid that reaps nothing): alive is not gone; killed, it is gone while
// still a zombie (nobody waited yet) and after it was reaped, and the
// check did not reap it (Wait still collects the status).
func TestProcessGone(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if processGone(pid) {
		t.Fatal("a running child reported gone")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; !processGone(pid); i++ {
		if i == 1000 {
			t.Fatal("a killed child never reported gone")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != -1 {
		t.Fatalf("Wait after the check: %v (the check must not reap)", err)
	}
	if !processGone(pid) {
		t.Fatal("a reaped child reported alive")
	}
}
