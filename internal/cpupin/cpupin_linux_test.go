package cpupin

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// onlyCPU reports whether thread tid (0: the calling one) may run on cpu
// alone.
func onlyCPU(tid, cpu int) bool {
	var set unix.CPUSet
	return unix.SchedGetaffinity(tid, &set) == nil && set.Count() == 1 && set.IsSet(cpu)
}

func allowedOf(status string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

const childEnv = "CPUPIN_TEST_CHILD"

// Pin narrows every thread of the process, and only processes started
// through Start get the whole set back. In a child process: pinning the
// test binary itself would narrow the tests that run after this one.
func TestPinAndStart(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		pinnedChild(t)
		return
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	if set.Count() < 2 {
		t.Skip("one CPU: Pin does nothing (nothing to gain)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPinAndStart$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("pinned child: %v\n%s", err, out)
	}
}

func pinnedChild(t *testing.T) {
	before, _ := os.ReadFile("/proc/self/status")
	full := allowedOf(string(before))
	// Threads the runtime has by now, and one more locked and parked, so
	// that Pin must find threads other than the calling one.
	started := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		runtime.LockOSThread()
		close(started)
		<-stop
	}()
	<-started
	var whole unix.CPUSet
	if err := unix.SchedGetaffinity(0, &whole); err != nil {
		t.Fatal(err)
	}
	wholeList := Full()
	// An early kernel: started before Pin, moved off the CPU Pin will take.
	early := exec.Command("sleep", "60")
	if err := early.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { early.Process.Kill(); early.Wait() }()
	Away(early.Process.Pid, "sandbox-id")
	cpu, err := Pin("sandbox-id")
	if err != nil || cpu < 0 || CPU() != cpu {
		t.Fatalf("Pin: %d, %v (CPU() %d)", cpu, err, CPU())
	}
	var away unix.CPUSet
	if err := unix.SchedGetaffinity(early.Process.Pid, &away); err != nil {
		t.Fatal(err)
	}
	if away.IsSet(cpu) || away.Count() != whole.Count()-1 {
		t.Errorf("Away left the early process %d of %d CPUs, including the pinned %d: %v", away.Count(), whole.Count(), cpu, away.IsSet(cpu))
	}
	// What the kernel is told to take back: the whole set, not the pin.
	if got := Full(); got != wholeList || strings.Count(got, ",") != whole.Count()-1 {
		t.Errorf("Full after Pin: %q, before: %q (%d CPUs)", got, wholeList, whole.Count())
	}
	Away(early.Process.Pid, "another") // pinned by now: does nothing
	var now unix.CPUSet
	if err := unix.SchedGetaffinity(early.Process.Pid, &now); err != nil || now != away {
		t.Errorf("Away after Pin moved the process: %v", err)
	}
	if again, err := Pin("another"); again != cpu || err != nil {
		t.Fatalf("a second Pin moved the process: %d, %v", again, err)
	}
	allPinned := func(when string) {
		t.Helper()
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			var set unix.CPUSet
			if unix.SchedGetaffinity(tid, &set) != nil {
				continue // exited
			}
			if !onlyCPU(tid, cpu) {
				t.Errorf("%s: thread %d may run on %d CPUs, want only %d", when, tid, set.Count(), cpu)
			}
		}
	}
	allPinned("after Pin")
	// A thread made after Pin inherits it.
	probe := make(chan bool)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		probe <- onlyCPU(0, cpu)
	}()
	if !<-probe {
		t.Errorf("a thread made after Pin may run on more than %d", cpu)
	}
	childSet := func(start func(*exec.Cmd) error) string {
		cmd := exec.Command("grep", "Cpus_allowed_list", "/proc/self/status")
		var b strings.Builder
		cmd.Stdout = &b
		if err := start(cmd); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		return allowedOf(b.String())
	}
	if got := childSet(Start); got != full {
		t.Errorf("a process started with Start may run on %s, want the whole %s", got, full)
	}
	// Without Start a child inherits the pin: what Start is for.
	if got := childSet((*exec.Cmd).Start); got != strconv.Itoa(cpu) {
		t.Errorf("a process started without Start may run on %s; expected the pin (%d)", got, cpu)
	}
	// Start left the thread it used pinned again.
	allPinned("after Start")
}

func TestPickSpreads(t *testing.T) {
	seen := map[int]int{}
	for i := range 400 {
		seen[pick([]int{0, 1, 2, 3}, "sandbox-"+strconv.Itoa(i))]++
	}
	for c := range 4 {
		if seen[c] < 50 {
			t.Fatalf("400 keys over 4 CPUs: %v", seen)
		}
	}
}
