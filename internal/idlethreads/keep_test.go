//go:build linux

package idlethreads

import (
	"os"
	"testing"
)

// TestKeep: after Keep(n) the process has at least n threads besides the
// main one (they were all held at once), and goes on running.
func TestKeep(t *testing.T) {
	const n = 12
	Keep(n)
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) < n+1 {
		t.Fatalf("%d threads after Keep(%d), want at least %d", len(ents), n, n+1)
	}
}
