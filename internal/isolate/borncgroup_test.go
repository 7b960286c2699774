//go:build linux

package isolate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/idlethreads"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// testMainEarly runs first in TestMain, before the runtime of a sandbox's
// init has done anything of ours: with ISOLATE_TEST_EARLY_CGROUP, stage 1
// prints the cgroups it was born in; with ISOLATE_TEST_MAIN_THREAD_START
// the process starts a child from its main goroutine (one P: the start's
// goroutine gets the main thread if nothing stops it) and reports its main
// thread's ids and cgroups after.
func testMainEarly() {
	if n, _ := strconv.Atoi(os.Getenv("ISOLATE_TEST_EARLY_THREADS")); n > 0 && IsChild() {
		// Threads made before stage 1 hardens the process (in place, it
		// must change them too): locked goroutines each take an M of
		// their own, which stays idle for reuse once unlocked.
		idlethreads.Keep(n)
	}
	if v, ok := os.LookupEnv(envKey); ok && os.Getenv("ISOLATE_TEST_EARLY_CGROUP") != "" {
		var cfg childConfig
		if json.Unmarshal([]byte(v), &cfg) == nil && cfg.Stage == 1 {
			b, _ := os.ReadFile("/proc/self/cgroup")
			fmt.Printf("early cgroup: %q\n", b)
		}
	}
	if owner := os.Getenv("ISOLATE_TEST_MAIN_THREAD_START"); owner != "" {
		runtime.GOMAXPROCS(1)
		n, _ := strconv.Atoi(owner)
		var cgs *threadCgroups
		if to := os.Getenv("ISOLATE_TEST_MAIN_THREAD_CGROUP"); to != "" {
			cgs = &threadCgroups{to: []string{to}, back: []string{filepath.Dir(to)}}
		}
		cmd := exec.Command("/bin/true")
		moved, err := startOnThread(cmd, n, cgs)
		if err == nil {
			// Reaped before we exit: an orphan still exiting would stay
			// listed in the test's cgroup for a moment (CI saw its pid).
			_ = cmd.Wait()
		}
		status, _ := os.ReadFile("/proc/self/status") // the main thread's
		cg, _ := os.ReadFile("/proc/self/cgroup")
		for line := range strings.Lines(string(status)) {
			if strings.HasPrefix(line, "Uid:") {
				fmt.Printf("start: moved %v err %v\nmain %s", moved, err, line)
			}
		}
		fmt.Printf("main cgroup: %q\n", cg)
		os.Exit(0)
	}
}

// cgroupLine returns the path /proc/<pid>/cgroup content b gives for
// controller ctl ("" for the v2 hierarchy).
func cgroupLine(b, ctl string) string {
	for line := range strings.Lines(b) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if ctl == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if ctl != "" && c == ctl {
				return parts[2]
			}
		}
	}
	return ""
}

// checkBornInCgroup starts a sandbox whose stage 1 prints its cgroups
// first thing, and checks that they are the sandbox's own (want: the path
// /proc/self/cgroup gives for each controller, from the sandbox's id), and
// that no thread of ours was in them at the release.
func checkBornInCgroup(t *testing.T, spec Spec, want func(p *Process) map[string]string) {
	t.Helper()
	var hookErr error
	testHookRelease = func(p *Process) {
		self, _ := os.ReadDir("/proc/self/task")
		for _, d := range p.CgroupDirs() {
			for _, f := range []string{"tasks", "cgroup.threads", "cgroup.procs"} {
				b, err := os.ReadFile(filepath.Join(d, f))
				if err != nil {
					continue
				}
				for _, e := range self {
					if strings.Contains(" "+strings.Join(strings.Fields(string(b)), " ")+" ", " "+e.Name()+" ") {
						hookErr = fmt.Errorf("our thread %s is in %s/%s at the release", e.Name(), d, f)
					}
				}
			}
			if b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); !strings.Contains(" "+strings.Join(strings.Fields(string(b)), " ")+" ", fmt.Sprintf(" %d ", p.Pid)) {
				hookErr = fmt.Errorf("the init %d is not in %s at the release: %q", p.Pid, d, b)
			}
		}
	}
	// Right after the clone, before anything else of Start's, the init is
	// in its cgroups already (the line above is the view from inside, at
	// its first instruction; this one can't race the init).
	var cloned string
	testHookCloned = func(p *Process) {
		cloned = string(must(os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.Pid))))
	}
	defer func() { testHookRelease, testHookCloned = nil, nil }()
	p, out := startSandbox(t, spec, "exit7", "ISOLATE_TEST_EARLY_CGROUP=1")
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("no early line from stage 1: %v", err)
	}
	var early string
	if _, err := fmt.Sscanf(strings.TrimPrefix(line, "early cgroup: "), "%q", &early); err != nil {
		t.Fatalf("early line %q: %v", line, err)
	}
	if hookErr != nil {
		t.Error(hookErr)
	}
	w := want(p)
	if len(w) == 0 {
		t.Fatal("the sandbox has no cgroup")
	}
	for ctl, path := range w {
		if got := cgroupLine(early, ctl); got != path {
			t.Errorf("stage 1's first instruction ran in %s cgroup %q, want the sandbox's %q", ctl, got, path)
		}
		if got := cgroupLine(cloned, ctl); got != path {
			t.Errorf("right after the clone the init is in %s cgroup %q, want the sandbox's %q", ctl, got, path)
		}
	}
	if info, err := p.Wait(); err != nil || info.ExitCode != 7 {
		t.Errorf("exit: %+v %v", info, err)
	}
}

// TestBornInCgroupV1: on cgroup v1 the sandbox's init runs its first
// instruction in its cgroups (the thread that clones it moved there
// first), so everything it does is accounted and limited; and no thread
// of the caller is left in them.
func TestBornInCgroupV1(t *testing.T) {
	requireRoot(t)
	fsys, err := detectCgroups()
	testdep.Require(t, err == nil && len(fsys.v1) > 0, fmt.Sprintf("a cgroup v1 hierarchy (%v)", err))
	if !cheapThreadMove() {
		t.Skip("kernel before 6.1: the init is moved in after its clone, before its release (checked by the hook)")
	}
	checkBornInCgroup(t, Spec{MemoryBytes: 256 << 20, CPUs: 1, Pids: 64}, func(p *Process) map[string]string {
		w := map[string]string{}
		self := string(must(os.ReadFile("/proc/self/cgroup")))
		for ctl := range fsys.v1 {
			// Ours, then newCgroupV1's <group>/<id>.
			w[ctl] = filepath.Join(cgroupLine(self, ctl), cgroupGroupName, p.ID)
		}
		return w
	})
}

// TestBornInCgroupV2: on cgroup v2 the init is cloned into its cgroup
// (CLONE_INTO_CGROUP). This host's controllers are bound to v1, so the
// test mounts the v2 hierarchy (no controllers: no limits) and makes the
// sandbox's cgroup under a parent of its own there.
func TestBornInCgroupV2(t *testing.T) {
	requireRoot(t)
	fs, _ := os.ReadFile("/proc/filesystems")
	testdep.Require(t, strings.Contains(string(fs), "cgroup2"), "a kernel with cgroup2")
	mnt := t.TempDir()
	if err := unix.Mount("none", mnt, "cgroup2", 0, ""); err != nil {
		testdep.Require(t, false, "mount cgroup2: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	own := cgroupLine(string(must(os.ReadFile("/proc/self/cgroup"))), "")
	parent := filepath.Join(mnt, own, fmt.Sprintf("cs-test-born-%d", os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Rmdir(parent) })
	testCgroups = &cgroupFS{v2: parent, v2Root: mnt}
	defer func() { testCgroups = nil }()
	checkBornInCgroup(t, Spec{}, func(p *Process) map[string]string {
		return map[string]string{"": filepath.Join(own, filepath.Base(parent), "code-sandbox-"+p.ID)}
	})
}

// TestStartKeepsMainThread: the start's changes (euid, cgroups) are made
// on a thread that ends after, never on the main thread, which Go keeps
// (wedged) when a goroutine locked to it ends: the main thread keeps
// euid 0 and its cgroups.
func TestStartKeepsMainThread(t *testing.T) {
	requireRoot(t)
	fsys, _ := detectCgroups()
	var to string
	if d, ok := fsys.v1["pids"]; ok && cheapThreadMove() {
		to = filepath.Join(d, fmt.Sprintf("cs-test-main-%d", os.Getpid()))
		if err := os.Mkdir(to, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Rmdir(to) })
	}
	before := cgroupLine(string(must(os.ReadFile("/proc/self/cgroup"))), "pids")
	for range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "ISOLATE_TEST_MAIN_THREAD_START=4242", "ISOLATE_TEST_MAIN_THREAD_CGROUP="+to)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "start:"):
				if !strings.Contains(l, "err <nil>") || (to != "") != strings.Contains(l, "moved true") {
					t.Errorf("%s (moving into %q)", l, to)
				}
			case strings.HasPrefix(l, "main Uid:"):
				if f := strings.Fields(l); len(f) < 4 || f[2] != "0" || f[3] != "0" {
					t.Errorf("the main thread's ids changed: %s", l)
				}
			case strings.HasPrefix(l, "main cgroup:"):
				var cg string
				fmt.Sscanf(strings.TrimPrefix(l, "main cgroup: "), "%q", &cg)
				if got := cgroupLine(cg, "pids"); got != before {
					t.Errorf("the main thread's pids cgroup is %q, was %q", got, before)
				}
			}
		}
	}
	if to != "" {
		if b, _ := os.ReadFile(filepath.Join(to, "tasks")); strings.TrimSpace(string(b)) != "" {
			t.Errorf("left in %s: %q", to, b)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
