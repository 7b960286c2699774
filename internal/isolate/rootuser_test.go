//go:build linux

package isolate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// sudo runs SudoPath by the name sudo, as user code does.
func sudo(args ...string) (string, int) {
	cmd := &exec.Cmd{Path: SudoPath, Args: append([]string{"sudo"}, args...), Env: os.Environ()}
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return err.Error(), -1
	}
	return strings.TrimSpace(string(out)), code
}

// runRootUserChecks runs as the sandbox's init (uid 1000, like the agent,
// non-dumpable like it) in a sandbox with a root user.
func runRootUserChecks() int {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Println("FAIL dumpable:", err)
		return 1
	}
	failed := 0
	check := func(name string, err error) {
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", name, err)
		} else {
			fmt.Printf("ok %s\n", name)
		}
	}
	// First, before any check starts a process: stage 2 waited for the
	// broker on a pipe kept open across stage 1's re-exec, and the test
	// holds a pipe without close-on-exec; neither may reach the init (fd 3
	// is the test's ExtraFiles).
	check("no stray pipe (the broker's status, the caller's) reaches the sandbox", func() error {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return err
		}
		for _, e := range ents {
			n, _ := strconv.Atoi(e.Name())
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			if n > 3 && strings.HasPrefix(l, "pipe:") {
				return fmt.Errorf("fd %d is %s", n, l)
			}
		}
		return nil
	}())
	want := func(args []string, wantOut string, wantCode int) error {
		out, code := sudo(args...)
		if code != wantCode || (wantOut != "*" && out != wantOut) {
			return fmt.Errorf("sudo %q: %q exit %d, want %q exit %d", args, out, code, wantOut, wantCode)
		}
		return nil
	}
	check("sudo runs as uid 0 of the sandbox", errors.Join(
		want([]string{"id", "-u"}, "0", 0), want([]string{"id", "-g"}, "0", 0),
		want([]string{"-u", "root", "sh", "-c", "echo $HOME $USER"}, "/root root", 0),
		want([]string{"sh", "-c", "exit 7"}, "", 7)))
	check("root sees the sandbox's cgroup as / (its own cgroup namespace), as the user does", func() error {
		mine, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(mine)) {
			if !strings.HasSuffix(strings.TrimSpace(line), ":/") {
				return fmt.Errorf("the user's /proc/self/cgroup: %q", mine)
			}
		}
		return want([]string{"cat", "/proc/self/cgroup"}, strings.TrimSpace(string(mine)), 0)
	}())
	check("the user itself is not root", func() error {
		if os.Getuid() != SandboxUID {
			return fmt.Errorf("uid %d", os.Getuid())
		}
		if err := syscall.Setuid(0); err == nil {
			return errors.New("setuid(0) worked")
		}
		return nil
	}())
	check("root writes its own files", errors.Join(
		want([]string{"sh", "-c", "echo x > /root/f && cat /root/f && mkdir /rootdir && stat -c %u /rootdir"}, "x\n0", 0),
		func() error {
			if err := os.WriteFile("/root/g", nil, 0o644); err == nil {
				return errors.New("the user writes into root's /root")
			}
			return nil
		}()))
	check("root can't write the system directories", errors.Join(
		want([]string{"sh", "-c", "echo x > /usr/evil"}, "*", 2),
		want([]string{"sh", "-c", "echo x > /etc/evil"}, "*", 2),
		want([]string{"sh", "-c", "echo x >> /etc/passwd"}, "*", 2),
		want([]string{"sh", "-c", "echo x > " + SudoPath}, "*", 2)))
	check("root holds no capability, no_new_privs, seccomp", func() error {
		out, code := sudo("cat", "/proc/self/status")
		if code != 0 {
			return fmt.Errorf("%q %d", out, code)
		}
		for _, f := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if !strings.Contains(out, f+":\t0000000000000000") {
				return fmt.Errorf("%s not empty: %s", f, out)
			}
		}
		if !strings.Contains(out, "NoNewPrivs:\t1") || !strings.Contains(out, "Seccomp:\t2") {
			return fmt.Errorf("no_new_privs or seccomp missing: %s", out)
		}
		return nil
	}())
	check("root can't reach the agent (PID 1, uid 1000, non-dumpable)", func() error {
		victim := exec.Command("/bin/sleep", "1000")
		if err := victim.Start(); err != nil {
			return err
		}
		defer func() { victim.Process.Kill(); victim.Wait() }()
		pid := strconv.Itoa(victim.Process.Pid)
		var errs []error
		for _, args := range [][]string{
			{"kill", "-9", pid}, {"kill", "-STOP", pid}, {"kill", "-9", "1"},
			{"cat", "/proc/1/environ"}, {"cat", "/proc/1/mem"}, {"readlink", "/proc/1/fd/1"}, {"readlink", "/proc/1/cwd"},
			{"sh", "-c", "echo 1 > /proc/1/oom_score_adj"},
		} {
			if out, code := sudo(args...); code == 0 {
				errs = append(errs, fmt.Errorf("root could %q: %q", args, out))
			}
		}
		if out, code := sudo("prlimit", "--pid", "1", "--nofile=1:1"); code == 0 {
			errs = append(errs, fmt.Errorf("root could prlimit the agent: %q", out))
		}
		if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
			errs = append(errs, fmt.Errorf("the user's process is gone: %v", err))
		}
		return errors.Join(errs...)
	}())
	check("a killed sudo takes its command along", func() error {
		c := &exec.Cmd{Path: SudoPath, Args: []string{"sudo", "sleep", "1000"}}
		if err := c.Start(); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond)
		c.Process.Kill()
		c.Wait()
		for range 50 {
			if !rootSleeping() {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return errors.New("root's sleep outlived its sudo")
	}())
	check("a signal to sudo reaches the command", func() error {
		c := &exec.Cmd{Path: SudoPath, Args: []string{"sudo", "sleep", "1000"}}
		if err := c.Start(); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond)
		c.Process.Signal(syscall.SIGTERM)
		err := c.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			return fmt.Errorf("sudo ended with %v, want SIGTERM", err)
		}
		return nil
	}())
	check("root's commands get no fd of the sandbox's setup", func() error {
		out, code := sudo("ls", "/proc/self/fd")
		if code != 0 || strings.Join(strings.Fields(out), " ") != "0 1 2 3" {
			return fmt.Errorf("fds %q (exit %d), want 0 1 2 and ls's own 3", out, code)
		}
		return nil
	}())
	check("sudo in /usr/local/bin, which a login shell's PATH has", func() error {
		out, err := exec.Command("/bin/sh", "-c", "PATH=/usr/local/bin:/usr/bin:/bin; sudo id -u; touch /usr/local/bin/x").CombinedOutput()
		if !strings.HasPrefix(string(out), "0\n") || err == nil {
			return fmt.Errorf("%q %v (want 0, then a refused write)", out, err)
		}
		return nil
	}())
	check("RootOpen: files as root for the agent", func() error {
		f, err := RootOpen("/root/deep/up.txt", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644, true)
		if err != nil {
			return err
		}
		_, err = f.WriteString("as root")
		f.Close()
		if err != nil {
			return err
		}
		if out, code := sudo("stat", "-c", "%U %a", "/root/deep/up.txt"); out != "root 644" || code != 0 {
			return fmt.Errorf("stat: %q %d", out, code)
		}
		if _, err := RootOpen("/root/none", os.O_RDONLY, 0, false); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("missing file: %v, want ErrNotExist", err)
		}
		if _, err := RootOpen("/usr/evil", os.O_WRONLY|os.O_CREATE, 0o644, false); err == nil {
			return errors.New("root opened /usr/evil for writing")
		}
		return nil
	}())
	check("sudo refuses other users", want([]string{"-u", "nobody", "id"}, "*", 1))
	if failed > 0 {
		return 1
	}
	return 0
}

// rootSleeping: a sleep of uid 0 runs in the sandbox.
func rootSleeping() bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		if strings.Contains(string(b), "Name:\tsleep") && strings.Contains(string(b), "Uid:\t0\t") {
			return true
		}
	}
	return false
}

// TestRootUser: a sandbox with a root user (uid 0 of its own user namespace,
// mapped to a host uid of its own) reaches it through sudo, and root there
// has no capability, can't write the host's directories, and can't touch the
// agent. Without HostRootUID there is no root at all.
func TestRootUser(t *testing.T) {
	if err := CheckSupport(); err != nil {
		testdep.Require(t, false, err.Error())
	}
	if os.Geteuid() != 0 {
		if _, err := Start(context.Background(), Spec{Args: []string{"isolate.test"}, Env: []string{"ISOLATE_TEST_MODE=exit7"}, HostRootUID: 200000, HostRootGID: 200000}); err == nil {
			t.Fatal("an unprivileged caller got a root user")
		}
		testdep.Require(t, false, "a root user needs a root caller")
	}
	// An extra file, as the local variant passes its listener and config:
	// Start must still see the status pipe's EOF (the broker holds no copy).
	extraR, extraW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer extraR.Close()
	defer extraW.Close()
	// A pipe this process holds without close-on-exec (as a caller may have
	// inherited one): it must not reach the sandbox either.
	var stray [2]int
	if err := unix.Pipe2(stray[:], 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(stray[0])
	defer unix.Close(stray[1])
	done := make(chan struct{})
	var p *Process
	var out io.Reader
	go func() {
		defer close(done)
		p, out = startSandbox(t, Spec{HostRootUID: RootModeHostUID - SandboxUID, HostRootGID: RootModeHostGID - SandboxGID, ExtraFiles: []*os.File{extraR}}, "root-user")
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return within 30s (a copy of the status pipe held by the broker?)")
	}
	if p == nil {
		return
	}
	all, _ := io.ReadAll(out)
	for line := range strings.Lines(string(all)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "FAIL") {
			t.Error(line)
		} else {
			t.Log(line)
		}
	}
	if !strings.Contains(string(all), "ok sudo refuses other users") {
		t.Errorf("the checks did not all run: %q", all)
	}
	if info, err := p.Wait(); err != nil || info.ExitCode != 0 {
		t.Errorf("Wait: %v %v", info, err)
	}
	// No root user unless asked for: no broker, no sudo, no /root.
	p2, out2 := startSandbox(t, Spec{}, "checks")
	io.Copy(io.Discard, out2)
	p2.Wait()
	if _, err := Start(context.Background(), Spec{Args: []string{"isolate.test"}, HostRootUID: 5, HostRootGID: 0}); err == nil {
		t.Error("HostRootUID without HostRootGID accepted")
	}
}

// TestRootBrokerFails: stage 1 no longer waits for the broker (stage 2
// does, so its start overlaps); a broker that fails must still fail the
// sandbox's start, with its reason, and nothing may run inside.
func TestRootBrokerFails(t *testing.T) {
	if os.Geteuid() != 0 {
		testdep.Require(t, false, "a root user needs a root caller")
	}
	_, err := Start(context.Background(), Spec{Args: []string{"isolate.test"}, Env: []string{"ISOLATE_TEST_MODE=exit7", brokerFailEnv + "=1"},
		HostRootUID: RootModeHostUID - SandboxUID, HostRootGID: RootModeHostGID - SandboxGID})
	if err == nil || !strings.Contains(err.Error(), "broker") || !strings.Contains(err.Error(), "failing as asked") {
		t.Fatalf("Start with a failing broker: %v, want the broker's error", err)
	}
}

// TestRootUserUnderGC: stage 1 re-executes through its fd of the binary
// after starting the root broker; nothing may close that fd meanwhile (an
// *os.File wrapping it did, from its finalizer, when a GC ran at the wrong
// time: "re-exec /proc/self/fd/5: no such file or directory" in CI).
// gcAfterBrokerEnv makes stage 1 collect right after the broker starts.
//
// Hardened in place, stage 2 and the broker's stage 4 are the same image
// as stages 1 and 3: one *os.File per fd (a second one's finalizer closed
// the status fd under stage 2: Start saw EOF and killed the sandbox,
// "killed by signal 9" in the local tests). Both ways.
func TestRootUserUnderGC(t *testing.T) {
	if os.Geteuid() != 0 {
		testdep.Require(t, false, "a root user needs a root caller")
	}
	for i := range 6 {
		p, out := startSandbox(t, Spec{HostRootUID: RootModeHostUID - SandboxUID, HostRootGID: RootModeHostGID - SandboxGID}, "exit7", gcAfterBrokerEnv+"=1", ReexecEnv+"="+strconv.Itoa(i%2))
		io.Copy(io.Discard, out)
		if info, err := p.Wait(); err != nil || info.ExitCode != 7 {
			t.Fatalf("Wait: %+v %v", info, err)
		}
	}
}

// TestRootAvailableBeforeReady: the agent decides whether the sandbox has a
// root user before stage 2 waits for the broker (the kernel's start
// overlaps it); a broker still starting must not make it "no root".
func TestRootAvailableBeforeReady(t *testing.T) {
	if os.Geteuid() != 0 {
		testdep.Require(t, false, "a root user needs a root caller")
	}
	p, out := startSandbox(t, Spec{HostRootUID: RootModeHostUID - SandboxUID, HostRootGID: RootModeHostGID - SandboxGID}, "root-before-ready", slowBrokerEnv+"=1")
	b, _ := io.ReadAll(out)
	if info, err := p.Wait(); err != nil || info.ExitCode != 0 {
		t.Fatalf("Wait: %+v %v (%s)", info, err, b)
	}
	if got := strings.TrimSpace(string(b)); got != "root before ready: true, after: true" {
		t.Errorf("%s", got)
	}
}

// procState is the state letter of pid in /proc/pid/stat ("" if gone).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// rootHeldChecks runs as the init of a sandbox with a root user after
// ChildAsync's ready, as the local variant's agent does, before anything
// has released the broker; mode says what to check. It prints one "ok" or
// "FAIL" line per check.
func rootHeldChecks(mode string) int {
	pid := rootBroker.pid
	check := func(what string, err error) {
		if err != nil {
			fmt.Printf("FAIL %s: %v\n", what, err)
		} else {
			fmt.Printf("ok %s\n", what)
		}
	}
	held := func() error {
		// SIGSTOP right after its exec: on a loaded machine the stop may
		// land a moment after ready.
		st := procState(pid)
		for end := time.Now().Add(2 * time.Second); st != "T" && time.Now().Before(end); st = procState(pid) {
			time.Sleep(5 * time.Millisecond)
		}
		if st != "T" {
			return fmt.Errorf("broker (pid %d) in state %q, want T (stopped)", pid, st)
		}
		if _, err := os.Lstat(RootSocket); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("socket before the broker's release: %v", err)
		}
		return nil
	}
	check("the broker is held after ready, its socket absent", held())
	switch mode {
	case "root-held":
		// sudo from a process of its own (not the holder) waits for the
		// broker; the holder's root request releases it.
		type res struct {
			out  string
			code int
		}
		c := make(chan res, 1)
		go func() { o, code := sudo("id", "-u"); c <- res{o, code} }()
		r := <-c
		check("a sudo (another process) releases the held broker and is served", func() error {
			if r.out != "0" || r.code != 0 {
				return fmt.Errorf("sudo id -u: %q exit %d, want 0", r.out, r.code)
			}
			return nil
		}())
		f, err := RootOpen("/root/held", os.O_CREATE|os.O_WRONLY, 0o600, false)
		if err == nil {
			var fi os.FileInfo
			if fi, err = f.Stat(); err == nil && fi.Sys().(*syscall.Stat_t).Uid != RootOuterUID {
				err = fmt.Errorf("owned by %d, want root (%d)", fi.Sys().(*syscall.Stat_t).Uid, RootOuterUID)
			}
			f.Close()
		}
		check("the holder's root request is served once the broker listens", err)
	case "root-held-holder":
		f, err := RootOpen("/root/held", os.O_CREATE|os.O_WRONLY, 0o600, false)
		if err == nil {
			f.Close()
		}
		check("the holder's root request releases the broker and is served", err)
	case "root-held-stays":
		// Nothing asks for root: it stays held, not started behind the
		// caller's back later (its Go start would cost CPU and memory
		// in every sandbox that never uses root).
		time.Sleep(1500 * time.Millisecond)
		check("the broker stays held while nothing asks for root", held())
		out, code := sudo("id", "-u")
		check("a sudo long after ready releases it and is served", func() error {
			if out != "0" || code != 0 {
				return fmt.Errorf("sudo id -u: %q exit %d, want 0", out, code)
			}
			return nil
		}())
	case "root-held-fails-sudo":
		// A broker that fails when another process's sudo released it
		// (the holder never did): the sudo says so without waiting out
		// its timeout, and the holder still learns why (its log).
		start := time.Now()
		_, code := sudo("id", "-u")
		took := time.Since(start)
		check("a sudo that released a failing broker fails soon", func() error {
			if code == 0 || took >= brokerStartTimeout {
				return fmt.Errorf("sudo id -u: exit %d after %v, want a failure before %v", code, took, brokerStartTimeout)
			}
			return nil
		}())
		select {
		case <-rootBroker.done:
		case <-time.After(brokerStartTimeout):
		}
		check("the holder learns why a broker it didn't release failed", func() error {
			select {
			case <-rootBroker.done:
			default:
				return errors.New("the broker's status was never read")
			}
			if rootBroker.err == nil || !strings.Contains(rootBroker.err.Error(), "failing as asked") {
				return fmt.Errorf("the holder's record of it: %v", rootBroker.err)
			}
			return nil
		}())
	case "root-held-fails":
		// A broker that fails once released: the sandbox is up (ready was
		// reported), and root's requests say why.
		_, err := RootOpen("/root/x", os.O_CREATE|os.O_WRONLY, 0o600, false)
		check("a failed broker's reason reaches root's requests", func() error {
			if err == nil || !strings.Contains(err.Error(), "failing as asked") {
				return fmt.Errorf("RootOpen: %v, want the broker's error", err)
			}
			return nil
		}())
	}
	return 0
}

// TestRootBrokerHeld: with ChildAsync (the local variant's agent) the
// broker is held stopped after ready until root is asked for (most
// sandboxes never do: a started broker would cost a Go start's CPU and
// memory in each); root's requests (sudo from any process, the holder's
// RootOpen) release it, wait for it and are served; nothing asks for
// root, it stays held; and a broker that fails once released reports why
// to root's requests and to the holder's log, whoever released it.
// (The sandbox's user owns root's user namespace, so it may signal the
// broker, held or not, as it may become root: root is no privilege over
// the user here, only the other way round; TestRootUser checks that.)
func TestRootBrokerHeld(t *testing.T) {
	if os.Geteuid() != 0 {
		testdep.Require(t, false, "a root user needs a root caller")
	}
	for _, tc := range []struct {
		mode string
		env  []string
		want string
	}{
		// Held until released: a request that didn't release it would
		// wait brokerStartTimeout and fail.
		{"root-held", nil, "ok the holder's root request is served once the broker listens"},
		{"root-held-holder", nil, "ok the holder's root request releases the broker and is served"},
		{"root-held-stays", nil, "ok a sudo long after ready releases it and is served"},
		{"root-held-fails", []string{brokerFailEnv + "=1"}, "ok a failed broker's reason reaches root's requests"},
		{"root-held-fails-sudo", []string{brokerFailEnv + "=1"}, "ok the holder learns why a broker it didn't release failed"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			p, out := startSandbox(t, Spec{HostRootUID: RootModeHostUID - SandboxUID, HostRootGID: RootModeHostGID - SandboxGID}, tc.mode, tc.env...)
			all, _ := io.ReadAll(out)
			for line := range strings.Lines(string(all)) {
				if line = strings.TrimSpace(line); strings.HasPrefix(line, "FAIL") {
					t.Error(line)
				} else {
					t.Log(line)
				}
			}
			if !strings.Contains(string(all), tc.want) {
				t.Errorf("the checks did not all run: %q", all)
			}
			if info, err := p.Wait(); err != nil || info.ExitCode != 0 {
				t.Errorf("Wait: %v %v", info, err)
			}
		})
	}
}
