//go:build linux

package isolate

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestCheckTaskRoomHere: this host has room for a sandbox's tasks, and not
// for more than its limits: the numbers are read and compared, not
// skipped over.
func TestCheckTaskRoomHere(t *testing.T) {
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		t.Skip("no /proc")
	}
	if n, ok := hostThreads(); !ok || n < 1 {
		t.Fatalf("hostThreads = %d, %v", n, ok)
	}
	if err := CheckTaskRoom(); err != nil {
		t.Fatalf("no room for one sandbox on the test machine: %v", err)
	}
	if n, limit, ok := TaskHeadroom(); !ok || n <= startTasks || limit == "" {
		t.Fatalf("TaskHeadroom = %d, %q, %v: want room for a sandbox under a named limit", n, limit, ok)
	}
	err := checkTaskRoom(1 << 40)
	var tle *TaskLimitError
	if !errors.As(err, &tle) || tle.Max <= 0 || tle.Used <= 0 || !strings.HasPrefix(tle.Limit, "kernel.") {
		t.Fatalf("checkTaskRoom(2^40) = %v, want a TaskLimitError of a kernel limit", err)
	}
	if initialPIDNS() {
		// In the initial namespace /proc counts what loadavg does (give or
		// take what started or ended in between).
		n, ok := pidNSTasks(1 << 40)
		h, _ := hostThreads()
		if !ok || n < h/2 || n > 2*h {
			t.Fatalf("pidNSTasks = %d, %v; the host has %d", n, ok, h)
		}
	}
}

func BenchmarkCheckTaskRoom(b *testing.B) {
	for b.Loop() {
		_ = CheckTaskRoom()
	}
}
