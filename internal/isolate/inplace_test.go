//go:build linux

package isolate

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// runThreadChecks (mode "threads", in the sandbox): a process forked from
// any thread of the init, not only the one stage 1 hardened, sees the
// sandbox's cgroup namespace and has the sandbox's credentials. Then it
// starts a child that stays (a kernel's stand-in, for the host's checks),
// says "ready" and waits.
func runThreadChecks() int {
	const n = 8
	var wg sync.WaitGroup
	hold := make(chan struct{})
	results := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			// Each locked to a thread of its own while it forks: the idle
			// threads stage 1 made before it hardened the process first.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			out, err := exec.Command("/bin/sh", "-c", "cat /proc/self/cgroup; grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status").Output()
			results[i] = fmt.Sprintf("%s%v", out, err)
			wg.Done()
			<-hold // keep the thread until all have forked
		}()
	}
	wg.Wait()
	close(hold)
	failed := 0
	for i, r := range results {
		bad := ""
		for line := range strings.Lines(r) {
			line = strings.TrimSpace(line)
			k, v, _ := strings.Cut(line, ":")
			switch {
			case strings.HasPrefix(k, "Cap"):
				if strings.TrimSpace(v) != "0000000000000000" {
					bad = line
				}
			case k == "NoNewPrivs":
				if strings.TrimSpace(v) != "1" {
					bad = line
				}
			case k == "Seccomp":
				if strings.TrimSpace(v) != "2" {
					bad = line
				}
			case line == "<nil>" || line == "":
			default: // a cgroup line: hierarchy-id:controllers:path
				if !strings.HasSuffix(line, ":/") {
					bad = line
				}
			}
		}
		if bad != "" || !strings.Contains(r, "<nil>") {
			failed++
			fmt.Printf("FAIL fork from thread %d: %q in %q\n", i, bad, r)
		}
	}
	if failed == 0 {
		fmt.Println("ok forks from every thread")
	}
	kid := exec.Command("/bin/sleep", "1000")
	if err := kid.Start(); err != nil {
		fmt.Println("FAIL start the kernel's stand-in:", err)
		return 1
	}
	fmt.Println("ready")
	time.Sleep(time.Hour) // not select{}: the runtime would call that a deadlock and exit
	return 0
}

// TestEveryThreadHardened: every thread of every process of a sandbox (its
// init, which stage 1 hardens in place where it can, the root broker, which
// does the same, and a child of the init) has no capability in any set,
// no_new_privs, the seccomp filter (the same one: Seccomp_filters equal),
// its process's uid and gid, and one cgroup namespace for all, the
// sandbox's own; a process forked from any thread of the init sees the
// sandbox's cgroup view. In place, the initial environment (where the
// kernel keeps the config stage 1 was started with) no longer holds the
// config. Both ways: in place and the re-exec fallback (ReexecEnv).
func TestEveryThreadHardened(t *testing.T) {
	if err := CheckSupport(); err != nil {
		testdep.Require(t, false, err.Error())
	}
	for _, reexec := range []bool{false, true} {
		name := "in place"
		if reexec {
			name = "re-exec"
		}
		t.Run(name, func(t *testing.T) {
			spec := Spec{}
			if os.Geteuid() == 0 {
				spec.HostRootUID, spec.HostRootGID = RootModeHostUID-SandboxUID, RootModeHostGID-SandboxGID
			}
			env := []string{"ISOLATE_TEST_EARLY_THREADS=6", ReexecEnv + "=0"}
			if reexec {
				env[1] = ReexecEnv + "=1"
			}
			// A pipe this process holds without close-on-exec (as a
			// caller may have inherited one): it must not reach the
			// sandbox, as the binary's fd must not (the exec closed both).
			var stray [2]int
			if err := unix.Pipe2(stray[:], 0); err != nil {
				t.Fatal(err)
			}
			defer unix.Close(stray[0])
			defer unix.Close(stray[1])
			strayLink, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", stray[0]))
			self, _ := os.Executable()
			p, out := startSandbox(t, spec, "threads", env...)
			waitReady(t, out)
			checkSandboxThreads(t, p, spec.HostRootUID > 0)
			fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", p.Pid))
			for _, fd := range fds {
				if l, _ := os.Readlink(fd); l == strayLink || l == self {
					t.Errorf("the init holds %s at %s", l, fd)
				}
			}
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(string(environ), `"stage":2`); got != reexec {
				t.Errorf("the init's environment holds stage 2's config: %v, want %v (in place: no config; re-exec: stage 2's)", got, reexec)
			}
			if strings.Contains(string(environ), `"stage":1`) {
				t.Errorf("the init's environment still holds stage 1's config: %q", environ)
			}
		})
	}
}

// waitReady reads the sandbox's output up to "ready", failing the test on
// any FAIL line before it.
func waitReady(t *testing.T, out *bufio.Reader) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := out.ReadString('\n')
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, "FAIL"):
				t.Error(line)
			case line == "ready":
				return
			case err != nil:
				t.Errorf("the sandbox ended before ready: %v", err)
				return
			default:
				t.Log(line)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no ready within 30s")
	}
}

// checkSandboxThreads checks, from the host, every thread of every process
// in p's pid namespace.
func checkSandboxThreads(t *testing.T, p *Process, wantBroker bool) {
	t.Helper()
	pidNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p.Pid))
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && ns == pidNS {
			pids = append(pids, pid)
		}
	}
	// The init, the sleep, and with a root user the broker.
	if want := 2 + btoi(wantBroker); len(pids) < want {
		t.Fatalf("%d processes in the sandbox (%v), want at least %d", len(pids), pids, want)
	}
	cgroupNS := ""
	threads := 0
	for _, pid := range pids {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("pid %d: tasks %v %v", pid, tasks, err)
		}
		var uid, gid, filters string
		for _, task := range tasks {
			threads++
			b, err := os.ReadFile(task + "/status")
			if err != nil {
				continue // exited meanwhile
			}
			f := map[string]string{}
			for line := range strings.Lines(string(b)) {
				k, v, _ := strings.Cut(line, ":")
				f[k] = strings.Join(strings.Fields(v), " ")
			}
			where := fmt.Sprintf("pid %d (%s) thread %s", pid, f["Name"], filepath.Base(task))
			for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
				if f[k] != "0000000000000000" {
					t.Errorf("%s: %s %s", where, k, f[k])
				}
			}
			if f["NoNewPrivs"] != "1" || f["Seccomp"] != "2" {
				t.Errorf("%s: NoNewPrivs %s Seccomp %s", where, f["NoNewPrivs"], f["Seccomp"])
			}
			if uid == "" {
				uid, gid, filters = f["Uid"], f["Gid"], f["Seccomp_filters"]
			} else if f["Uid"] != uid || f["Gid"] != gid || f["Seccomp_filters"] != filters {
				t.Errorf("%s: Uid %s Gid %s Seccomp_filters %s, the process's first thread %s %s %s", where, f["Uid"], f["Gid"], f["Seccomp_filters"], uid, gid, filters)
			}
			ns, err := os.Readlink(task + "/ns/cgroup")
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if cgroupNS == "" {
				cgroupNS = ns
			} else if ns != cgroupNS {
				t.Errorf("%s: cgroup namespace %s, others' %s", where, ns, cgroupNS)
			}
		}
	}
	host, _ := os.Readlink("/proc/self/ns/cgroup")
	if cgroupNS == host {
		t.Errorf("the sandbox is in the host's cgroup namespace %s", host)
	}
	t.Logf("%d processes, %d threads checked", len(pids), threads)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
