package kernel

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestRestartBusyKernel: Restart resets a kernel stuck in a cell (it used to
// wait for the execution lock, i.e. for the cell to end). The busy
// execution returns reporting the kernel's death; the next one runs in a
// fresh kernel.
func TestRestartBusyKernel(t *testing.T) {
	s := newTestSession(t)
	if _, err := s.Execute(context.Background(), Request{Code: "x = 1"}, nil); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan Outcome, 1)
	go func() {
		out, _ := s.Execute(context.Background(), Request{Code: "print('spinning', flush=True)\nwhile True: pass"}, func(ev Event) {
			if ev.Type == "stdout" {
				select {
				case <-started:
				default:
					close(started)
				}
			}
		})
		done <- out
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart of a busy kernel: %v", err)
	}
	select {
	case out := <-done:
		if !out.KernelDied {
			t.Errorf("the busy execution did not report the kernel's end: %+v", out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the busy execution did not return after Restart")
	}
	var errName string
	if _, err := s.Execute(context.Background(), Request{Code: "x"}, func(ev Event) {
		if ev.Type == "error" {
			errName = ev.Name
		}
	}); err != nil || errName != "NameError" {
		t.Fatalf("after Restart the state must be fresh: %v %q", err, errName)
	}
}

// TestKernelWaitDoesNotHoldTheLock: kernel() waits (up to 2 s) for the pump
// of a kernel whose process is gone; meanwhile Pid (and Interrupt, Close)
// must not wait behind it. The kernel here is a process that exited and
// was reaped (gone) whose pump never finishes.
func TestKernelWaitDoesNotHoldTheLock(t *testing.T) {
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	s := NewSession(Options{})
	s.k = &kproc{pid: c.Process.Pid, done: make(chan struct{})}
	order := make(chan string, 2)
	go func() {
		_, _, _ = s.kernel(false)
		order <- "kernel"
	}()
	time.Sleep(100 * time.Millisecond) // kernel() is in its wait by now
	go func() {
		s.Pid()
		order <- "pid"
	}()
	if first := <-order; first != "pid" {
		t.Fatalf("Pid waited for kernel()'s 2 s wait: it holds the session's lock")
	}
	<-order
}
