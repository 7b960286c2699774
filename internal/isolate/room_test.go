//go:build linux

package isolate

import (
	"errors"
	"os"
	"path/filepath"
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

// TestReadStats: memory.stat's "key value" lines and ZFS arcstats' "name
// type data" ones (after two header lines), in the kernel's layout.
func TestReadStats(t *testing.T) {
	dir := t.TempDir()
	stat := filepath.Join(dir, "memory.stat")
	if err := os.WriteFile(stat, []byte("anon 1000\nfile 5000\nshmem 700\nslab_reclaimable 300\nfile_mapped 20\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := memStat(stat, true)
	if st["file"] != 5000 || st["shmem"] != 700 || st["slab_reclaimable"] != 300 || len(st) != 3 {
		t.Fatalf("v2 memory.stat: %v", st)
	}
	arc := filepath.Join(dir, "arcstats")
	if err := os.WriteFile(arc, []byte("13 1 0x01 147 39984 5374390372 1862442366406\nname                            type data\nhits                            4    1000\nsize                            4    3000000\nc_min                           4    1000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := kstat(arc); st["size"] != 3000000 || st["c_min"] != 1000000 {
		t.Fatalf("arcstats: %v", st)
	}
	if st := memStat(filepath.Join(dir, "missing"), false); len(st) != 0 {
		t.Fatalf("a missing file: %v", st)
	}
}
