//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

const seccompAllEnv = "ISOLATE_TEST_SECCOMP_ALL_THREADS"

// TestLoadSeccompAllThreads: the filter LoadSeccompAllThreads installs holds
// on every thread of the process, including threads that existed before
// (the docker agent is a Go program with several), with no_new_privs. It runs
// in a child process: a filter can't be removed.
func TestLoadSeccompAllThreads(t *testing.T) {
	if os.Getenv(seccompAllEnv) == "1" {
		if err := seccompAllThreadsChild(); err != nil {
			fmt.Println("FAIL:", err)
			os.Exit(1)
		}
		fmt.Println("OK")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadSeccompAllThreads$", "-test.count=1")
	cmd.Env = append(os.Environ(), seccompAllEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func seccompAllThreadsChild() error {
	// Threads that exist before the filter does, each locked, waiting.
	const n = 4
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		ready.Add(1)
		go func(i int) {
			defer wg.Done()
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			ready.Done()
			<-start
			errs[i] = probeSeccomp()
		}(i)
	}
	ready.Wait()
	if err := LoadSeccompAllThreads(); err != nil {
		return err
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Every thread: no_new_privs and seccomp filter mode.
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) < n {
		return fmt.Errorf("threads: %v %v", tasks, err)
	}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that just exited
		}
		s := string(b)
		if !strings.Contains(s, "NoNewPrivs:\t1") || !strings.Contains(s, "Seccomp:\t2") {
			return fmt.Errorf("%s: no_new_privs or seccomp missing:\n%s", p, s)
		}
	}
	return nil
}

// probeSeccomp checks, on the calling thread, calls the filter refuses
// before their arguments are looked at.
func probeSeccomp() error {
	for _, c := range []struct {
		name string
		nr   uintptr
		args [3]uintptr
		want unix.Errno
	}{
		{"unshare(CLONE_NEWUSER)", unix.SYS_UNSHARE, [3]uintptr{unix.CLONE_NEWUSER}, unix.EPERM},
		{"ptrace(PTRACE_ATTACH, 1)", unix.SYS_PTRACE, [3]uintptr{unix.PTRACE_ATTACH, 1}, unix.EPERM},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, [3]uintptr{1, 0}, unix.ENOSYS},
		{"keyctl", unix.SYS_KEYCTL, [3]uintptr{1}, unix.EPERM},
		{"bpf", unix.SYS_BPF, [3]uintptr{0, 0, 0}, unix.EPERM},
	} {
		_, _, errno := unix.Syscall(c.nr, c.args[0], c.args[1], c.args[2])
		if errno != c.want {
			return fmt.Errorf("thread %d: %s: errno %v, want %v", unix.Gettid(), c.name, errno, c.want)
		}
	}
	return nil
}
