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

// cpus parses a Cpus_allowed_list ("0-3,6").
func cpus(list string) []int {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, _ := strconv.Atoi(lo)
		b := a
		if isRange {
			b, _ = strconv.Atoi(hi)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out
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
	cpu, err := Pin("sandbox-id")
	if err != nil || cpu < 0 || CPU() != cpu {
		t.Fatalf("Pin: %d, %v (CPU() %d)", cpu, err, CPU())
	}
	if again, err := Pin("another"); again != cpu || err != nil {
		t.Fatalf("a second Pin moved the process: %d, %v", again, err)
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		st, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			continue // exited
		}
		if got := cpus(allowedOf(string(st))); len(got) != 1 || got[0] != cpu {
			t.Errorf("thread %s may run on %v, want only %d", task.Name(), got, cpu)
		}
	}
	// A thread made after Pin inherits it.
	probe := make(chan []int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		st, _ := os.ReadFile("/proc/thread-self/status")
		probe <- cpus(allowedOf(string(st)))
	}()
	if got := <-probe; len(got) != 1 || got[0] != cpu {
		t.Errorf("a thread made after Pin may run on %v", got)
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
	tasks, _ = os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		st, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err == nil && allowedOf(string(st)) != strconv.Itoa(cpu) {
			t.Errorf("after Start, thread %s may run on %s", task.Name(), allowedOf(string(st)))
		}
	}
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
