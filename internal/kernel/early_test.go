//go:build linux

package kernel

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// adoptedSession starts a kernel with SpawnEarly and hands it to a new
// session through AdoptEarly, on copies of its fds (as across the exec of
// a sandbox's stage 1 into the agent).
func adoptedSession(t *testing.T) (*Session, int) {
	t.Helper()
	_, err := os.Stat(testPython)
	testdep.Require(t, err == nil, testPython+" (make deps)")
	o := Options{Python: testPython, Cwd: t.TempDir(), ScriptDir: scriptDir(t)}
	e, err := SpawnEarly(o)
	if err != nil {
		t.Fatal(err)
	}
	var dups [4]int
	for i, fd := range e.FDs() {
		if dups[i], err = unix.Dup(fd); err != nil {
			t.Fatal(err)
		}
	}
	pid := e.Pid()
	// The spawning side's copies go, as with the exec (not its process).
	for _, f := range e.Files() {
		f.Close()
	}
	e.take()
	a, err := AdoptEarly(pid, dups)
	if err != nil {
		t.Fatal(err)
	}
	o.Early = a
	s := NewSession(o)
	t.Cleanup(func() { s.Close() })
	return s, pid
}

// TestAdoptedKernel: a kernel started ahead (SpawnEarly) and adopted
// (AdoptEarly) runs cells, dies and is described like one the session
// started (its end read through our own pidfd and wait4, not os/exec), is
// killed by Close, and is replaced by a fresh kernel afterwards.
func TestAdoptedKernel(t *testing.T) {
	s, pid := adoptedSession(t)
	if r := exec1(t, s, "import os\nos.getpid()"); str(t, r.main().Data["text/plain"]) != strconv.Itoa(pid) {
		t.Fatalf("not the adopted kernel (pid %d): %+v", pid, r.events)
	}
	for _, tc := range []struct{ code, want string }{
		{"import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "signal 9"},
		{"import os\nos._exit(3)", "status 3"},
	} {
		r := exec1(t, s, tc.code)
		errs := r.errors()
		if !r.out.KernelDied || len(errs) != 1 || errs[0].Name != "KernelDied" || !strings.Contains(errs[0].Value, tc.want) {
			t.Fatalf("%q: %+v %+v", tc.code, r.out, r.events)
		}
		if alive(pid) {
			t.Fatalf("kernel %d still alive", pid)
		}
		if r := exec1(t, s, "1 + 1"); str(t, r.main().Data["text/plain"]) != "2" || s.Pid() == pid {
			t.Fatalf("after death: pid %d, %+v", s.Pid(), r.events)
		}
	}

	// Close kills and reaps an adopted kernel that is still running.
	s2, pid2 := adoptedSession(t)
	exec1(t, s2, "1")
	s2.Close()
	if alive(pid2) {
		t.Fatalf("adopted kernel %d alive after Close", pid2)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid2, &ws, syscall.WNOHANG, nil); err != syscall.ECHILD {
		t.Fatalf("adopted kernel %d not reaped: %v", pid2, err)
	}

	// An Early nobody took is killed and reaped by its Close.
	e, err := SpawnEarly(Options{Python: testPython, Cwd: t.TempDir(), ScriptDir: scriptDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	pid3 := e.Pid()
	e.Close()
	if _, err := syscall.Wait4(pid3, &ws, syscall.WNOHANG, nil); err != syscall.ECHILD {
		t.Fatalf("unadopted kernel %d not reaped: %v", pid3, err)
	}
}
