//go:build linux

package isolate

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// LastCap asks the kernel, not the file; both must agree, or a loop over
// the capabilities would leave the newest in a sandbox's sets (too low) or
// fail on one the kernel doesn't know (too high).
func TestLastCap(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		t.Fatal(err)
	}
	want, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if got := probeLastCap(); got != want {
		t.Fatalf("probeLastCap() = %d, /proc/sys/kernel/cap_last_cap says %d", got, want)
	}
	if got := LastCap(); got != want {
		t.Fatalf("LastCap() = %d, want %d", got, want)
	}
}
