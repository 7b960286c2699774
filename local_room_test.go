//go:build linux

package sandboxes_test

import (
	"context"
	"errors"
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

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/testcgroup"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// roomChildEnv names, in the child TestLocalRoomChild runs in, the
// limit it is expected to run into.
const roomChildEnv = "CS_ROOM_LIMIT"

// TestLocalRoom: a caller that creates sandboxes until the host has no
// process ids or memory left for another gets a clear refusal (ErrNoRoom,
// the limit, its numbers and what to change) before anything half-starts,
// instead of a supervisor or init dying for want of a thread with an error
// that says nothing of why, or the OOM killer choosing among what runs.
// The sandboxes already running keep room to start commands, and closing
// them leaves nothing behind. Three real limits, each in a child of this
// test that runs TestLocalRoomChild:
//   - the pids.max of the creator's cgroup (a cgroup made for the child);
//   - kernel.pid_max of a pid namespace of the child's own (Linux 6.14+
//     lets a pid namespace have a lower one), where the host's thread count
//     is no measure and the namespace's tasks are counted;
//   - the memory limit of the creator's cgroup (a container's --memory).
func TestLocalRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	testdep.Require(t, os.Geteuid() == 0, "root (to make cgroups and a pid namespace)")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := fmt.Sprintf("%s -test.run='^TestLocalRoomChild$' -test.v -test.timeout=4m", exe)

	t.Run("cgroup pids.max", func(t *testing.T) {
		dir := testcgroup.New(t, "pids")
		// 200 tasks: about nine sandboxes of ~18, the test binary's threads
		// and a reserve of 6.
		if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("200"), 0o644); err != nil {
			t.Fatal(err)
		}
		procs := filepath.Join(dir, "cgroup.procs")
		runRoomChild(t, "pids.max", "echo $$ > "+procs+" && exec "+child)
	})

	t.Run("cgroup memory limit", func(t *testing.T) {
		dir := testcgroup.New(t, "memory")
		// 320 MiB: the check keeps 16 free and asks 32 for a start; a
		// sandbox of this test binary keeps about 17 (its Go processes are
		// the whole test binary), so about fifteen after the child's own.
		limitFile := "memory.max"
		if _, err := os.Stat(filepath.Join(dir, limitFile)); err != nil {
			limitFile = "memory.limit_in_bytes" // v1
		}
		if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.Itoa(320<<20)), 0o644); err != nil {
			t.Fatal(err)
		}
		// No swap to hide memory in (v2; v1 hosts here have none).
		_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0o644)
		procs := filepath.Join(dir, "cgroup.procs")
		runRoomChild(t, limitFile, "echo $$ > "+procs+" && exec "+child)
	})

	t.Run("pid namespace pid_max", func(t *testing.T) {
		unshare, err := exec.LookPath("unshare")
		testdep.Require(t, err == nil, "unshare (util-linux)")
		// A pid namespace with its own /proc, whose pid_max the shell
		// lowers (Linux 6.14+; older kernels refuse the write); the shell
		// stays its pid 1, to reap what is orphaned in it. 600: a reserve of
		// 18 + 300 (the pids the kernel keeps below 300 once they wrap), so
		// room for about twelve sandboxes.
		probe := exec.Command(unshare, "-p", "-f", "--mount-proc", "sh", "-c", "echo 600 > /proc/sys/kernel/pid_max")
		out, err := probe.CombinedOutput()
		testdep.Require(t, err == nil, fmt.Sprintf("a kernel that gives a pid namespace its own kernel.pid_max (Linux 6.14+): %v %s", err, out))
		// 700 idle threads outside the namespace: the host's count is then
		// above the namespace's pid_max whatever else runs, and only the
		// namespace's own count (what the child checks it was refused on)
		// can tell that there is room.
		holdThreads(t, 700)
		runRoomChild(t, "kernel.pid_max", "", unshare, "-p", "-f", "--mount-proc", "sh", "-c",
			"echo 600 > /proc/sys/kernel/pid_max && "+child)
	})
}

// holdThreads keeps n OS threads of this process alive until the test
// ends: a goroutine that ends locked to its thread ends the thread too.
func holdThreads(t *testing.T, n int) {
	release := make(chan struct{})
	var started sync.WaitGroup
	for range n {
		started.Add(1)
		go func() {
			runtime.LockOSThread()
			started.Done()
			<-release
		}()
	}
	started.Wait()
	t.Cleanup(func() { close(release) })
}

// runRoomChild runs the child through sh -c script (or argv when
// given) with roomChildEnv=limit, and fails unless it passed.
func runRoomChild(t *testing.T, limit, script string, argv ...string) {
	t.Helper()
	if len(argv) == 0 {
		argv = []string{"sh", "-c", script}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// GOMAXPROCS=2: the room left is counted in tasks, and a many-core
	// runner's test binary would otherwise hold a thread per core.
	cmd.Env = append(os.Environ(), roomChildEnv+"="+limit, "GOMAXPROCS=2")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestLocalRoomChild") {
		t.Fatalf("child: %v", err)
	}
}

// hostTasks is the host's task count (/proc/loadavg's total).
func hostTasks() int64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0
	}
	_, total, _ := strings.Cut(f[3], "/")
	n, _ := strconv.ParseInt(total, 10, 64)
	return n
}

// TestLocalRoomChild is TestLocalRoom's child: it runs only there.
func TestLocalRoomChild(t *testing.T) {
	limit := os.Getenv(roomChildEnv)
	if limit == "" {
		t.Skip("run by TestLocalRoom")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt := t.TempDir()
	cfg := sandboxes.Config{Variant: "local", Options: local.Options{RuntimeDir: rt}}
	var sbs []*sandboxes.Sandbox
	defer func() {
		for _, sb := range sbs {
			_ = sb.Close()
		}
	}()
	var refused error
	for len(sbs) < 60 {
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			refused = err
			break
		}
		sbs = append(sbs, sb)
	}
	t.Logf("%d sandboxes created, then: %v", len(sbs), refused)
	var re *isolate.RoomError
	switch {
	case refused == nil:
		t.Fatalf("60 sandboxes and no refusal: the %s limit was not enforced", limit)
	case !errors.Is(refused, sandboxes.ErrNoRoom) || !errors.Is(refused, sandboxes.ErrUnavailable) || !errors.As(refused, &re):
		t.Fatalf("refused with %v, want ErrNoRoom (an ErrUnavailable) and a RoomError", refused)
	case strings.Contains(refused.Error(), "likely why"):
		// whyNoStart's form: a start was tried and failed half-way.
		t.Fatalf("refused only after a start failed: %v", refused)
	case !strings.HasSuffix(re.Limit, limit):
		t.Fatalf("refused for %s, want %s", re.Limit, limit)
	case limit == "kernel.pid_max" && re.Used >= hostTasks():
		// The parent holds 700 threads outside the namespace.
		t.Fatalf("refused on %d tasks, the host's count (%d), not the namespace's own", re.Used, hostTasks())
	case len(sbs) < 2:
		t.Fatalf("refused after %d sandboxes: the reserve is too big for this limit", len(sbs))
	case !strings.Contains(refused.Error(), "raise"):
		t.Fatalf("the refusal doesn't say what to do: %v", refused)
	}
	// What the refusal kept free: every sandbox can still start processes.
	for i, sb := range sbs {
		ex, err := sb.RunCode(ctx, "import subprocess; subprocess.run(['true'], check=True); 40 + 2")
		if err != nil || ex.Error != nil || ex.Text() != "42" {
			t.Fatalf("sandbox %d after the refusal: %v %v", i, err, ex)
		}
	}
	for _, sb := range sbs {
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	sbs = nil
	// Closed sandboxes leave nothing; the refused one never had anything.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, _ := os.ReadDir(rt)
		if len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left in the runtime dir: %v", ents)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
