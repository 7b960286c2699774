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
	"unsafe"

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
	if err := probeSocketFamilies(); err != nil {
		return err
	}
	if err := probeOtherProcesses(); err != nil {
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

// probeSocketFamilies: only unix, inet, inet6 and netlink (route, sock_diag)
// sockets can be created; any other family fails with EAFNOSUPPORT (what a
// kernel without it says), also when the int argument carries garbage in
// its upper 32 bits, which the kernel ignores.
func probeSocketFamilies() error {
	const hi = 1 << 32
	for _, c := range []struct {
		name           string
		domain, typ, p uintptr
		want           unix.Errno
	}{
		{"AF_UNIX", unix.AF_UNIX, unix.SOCK_STREAM, 0, 0},
		{"AF_INET", unix.AF_INET, unix.SOCK_STREAM, 0, 0},
		{"AF_INET6", unix.AF_INET6, unix.SOCK_DGRAM, 0, 0},
		{"AF_NETLINK route", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE, 0},
		{"AF_VSOCK", unix.AF_VSOCK, unix.SOCK_STREAM, 0, unix.EAFNOSUPPORT},
		{"AF_VSOCK with upper bits", hi | unix.AF_VSOCK, unix.SOCK_STREAM, 0, unix.EAFNOSUPPORT},
		{"AF_UNIX with upper bits (the kernel reads AF_UNIX)", hi | unix.AF_UNIX, unix.SOCK_STREAM, 0, 0},
		{"AF_PACKET", unix.AF_PACKET, unix.SOCK_RAW, 0, unix.EAFNOSUPPORT},
		{"AF_ALG", unix.AF_ALG, unix.SOCK_SEQPACKET, 0, unix.EAFNOSUPPORT},
		{"AF_BLUETOOTH", unix.AF_BLUETOOTH, unix.SOCK_RAW, 0, unix.EAFNOSUPPORT},
		{"AF_CAN", unix.AF_CAN, unix.SOCK_RAW, 0, unix.EAFNOSUPPORT},
		{"AF_KEY", unix.AF_KEY, unix.SOCK_RAW, 2, unix.EAFNOSUPPORT},
		{"AF_NETLINK audit", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT, unix.EAFNOSUPPORT},
		{"AF_NETLINK uevent", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_KOBJECT_UEVENT, unix.EAFNOSUPPORT},
	} {
		fd, _, errno := unix.Syscall(unix.SYS_SOCKET, c.domain, c.typ, c.p)
		if errno == 0 {
			unix.Close(int(fd))
		}
		if errno != c.want {
			return fmt.Errorf("socket(%s): errno %v, want %v", c.name, errno, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		domain uintptr
		want   unix.Errno
	}{
		{"AF_UNIX", unix.AF_UNIX, 0},
		{"AF_VSOCK", unix.AF_VSOCK, unix.EAFNOSUPPORT},
		{"AF_UNIX with upper bits", hi | unix.AF_UNIX, 0},
	} {
		var fds [2]int32
		_, _, errno := unix.Syscall6(unix.SYS_SOCKETPAIR, c.domain, unix.SOCK_STREAM, 0, uintptr(unsafe.Pointer(&fds)), 0, 0)
		if errno == 0 {
			unix.Close(int(fds[0]))
			unix.Close(int(fds[1]))
		}
		if errno != c.want {
			return fmt.Errorf("socketpair(%s): errno %v, want %v", c.name, errno, c.want)
		}
	}
	return nil
}

// probeOtherProcesses: resource limits, priorities and scheduling can be
// changed for the calling process only, never for another one of the same
// uid (the sandbox's agent, PID 1, and its threads). The target is a
// process of our own, so a filter that lets a call through harms nothing.
func probeOtherProcesses() error {
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		return err
	}
	defer func() { _ = victim.Process.Kill(); _ = victim.Wait() }()
	pid := uintptr(victim.Process.Pid)
	const hi = 1 << 32
	lim := unix.Rlimit{Cur: 1, Max: 1}
	var old unix.Rlimit
	prio := uintptr(3) // IOPRIO_CLASS_IDLE << 13
	prio <<= 13
	param := struct{ prio int32 }{0}
	for _, c := range []struct {
		name string
		nr   uintptr
		args [4]uintptr
		want unix.Errno
	}{
		{"prlimit64(other, NOFILE, new)", unix.SYS_PRLIMIT64, [4]uintptr{pid, unix.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&lim)), 0}, unix.EPERM},
		{"prlimit64(other|hi, NOFILE, new)", unix.SYS_PRLIMIT64, [4]uintptr{hi | pid, unix.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&lim)), 0}, unix.EPERM},
		{"prlimit64(other, NOFILE, nil, old) (read)", unix.SYS_PRLIMIT64, [4]uintptr{pid, unix.RLIMIT_NOFILE, 0, uintptr(unsafe.Pointer(&old))}, 0},
		{"prlimit64(0, CORE, new) (self)", unix.SYS_PRLIMIT64, [4]uintptr{0, unix.RLIMIT_CORE, uintptr(unsafe.Pointer(&unix.Rlimit{}))}, 0},
		{"setpriority(PRIO_PROCESS, other)", unix.SYS_SETPRIORITY, [4]uintptr{unix.PRIO_PROCESS, pid, 19}, unix.EPERM},
		{"setpriority(PRIO_PROCESS|hi, other)", unix.SYS_SETPRIORITY, [4]uintptr{unix.PRIO_PROCESS, hi | pid, 19}, unix.EPERM},
		{"setpriority(PRIO_PGRP, 0)", unix.SYS_SETPRIORITY, [4]uintptr{unix.PRIO_PGRP, 0, 19}, unix.EPERM},
		{"setpriority(PRIO_USER, 0)", unix.SYS_SETPRIORITY, [4]uintptr{unix.PRIO_USER, 0, 19}, unix.EPERM},
		{"setpriority(hi|PRIO_USER, 0)", unix.SYS_SETPRIORITY, [4]uintptr{hi | unix.PRIO_USER, 0, 19}, unix.EPERM},
		{"setpriority(PRIO_PROCESS, 0) (self)", unix.SYS_SETPRIORITY, [4]uintptr{unix.PRIO_PROCESS, 0, 1}, 0},
		{"ioprio_set(PROCESS, other)", unix.SYS_IOPRIO_SET, [4]uintptr{1, pid, prio}, unix.EPERM},
		{"ioprio_set(USER, 0)", unix.SYS_IOPRIO_SET, [4]uintptr{3, 0, prio}, unix.EPERM},
		{"ioprio_set(PGRP, 0)", unix.SYS_IOPRIO_SET, [4]uintptr{2, 0, prio}, unix.EPERM},
		{"sched_setscheduler(other, SCHED_IDLE)", unix.SYS_SCHED_SETSCHEDULER, [4]uintptr{pid, 5, uintptr(unsafe.Pointer(&param))}, unix.EPERM},
		{"sched_setparam(other)", unix.SYS_SCHED_SETPARAM, [4]uintptr{pid, uintptr(unsafe.Pointer(&param))}, unix.EPERM},
		{"sched_setattr(other)", unix.SYS_SCHED_SETATTR, [4]uintptr{pid, 0, 0}, unix.EPERM},
	} {
		_, _, errno := unix.Syscall6(c.nr, c.args[0], c.args[1], c.args[2], c.args[3], 0, 0)
		if errno != c.want {
			return fmt.Errorf("%s: errno %v, want %v", c.name, errno, c.want)
		}
	}
	return nil
}
