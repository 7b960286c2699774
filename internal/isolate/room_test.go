//go:build linux

package isolate

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestCheckRoomHere: this host has room for a sandbox's tasks and memory,
// and not for more than its limits: the numbers are read and compared, not
// skipped over.
func TestCheckRoomHere(t *testing.T) {
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		t.Skip("no /proc")
	}
	if n, ok := hostThreads(); !ok || n < 1 {
		t.Fatalf("hostThreads = %d, %v", n, ok)
	}
	if err := CheckRoom(); err != nil {
		t.Fatalf("no room for one sandbox on the test machine: %v", err)
	}
	if n, limit, ok := TaskHeadroom(); !ok || n <= startTasks || limit == "" {
		t.Fatalf("TaskHeadroom = %d, %q, %v: want room for a sandbox under a named limit", n, limit, ok)
	}
	err := checkRoom(1<<40, 0)
	var tle *RoomError
	if !errors.As(err, &tle) || tle.Max <= 0 || tle.Used <= 0 || !strings.HasPrefix(tle.Limit, "kernel.") {
		t.Fatalf("checkRoom(2^40 tasks) = %v, want a RoomError of a kernel limit", err)
	}
	if n, limit, ok := MemoryHeadroom(); !ok || n <= startMemory || limit == "" {
		t.Fatalf("MemoryHeadroom = %d, %q, %v: want room for a sandbox under a named limit", n, limit, ok)
	}
	err = checkRoom(0, 1<<50)
	if !errors.As(err, &tle) || !tle.Memory || tle.Max <= 0 || tle.Used <= 0 {
		t.Fatalf("checkRoom(2^50 bytes) = %v, want a RoomError on memory", err)
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

func BenchmarkCheckRoom(b *testing.B) {
	for b.Loop() {
		_ = CheckRoom()
	}
}
