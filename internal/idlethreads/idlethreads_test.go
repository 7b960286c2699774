//go:build linux

package idlethreads

import (
	"runtime"
	"testing"
	"time"
)

// TestShedEndsIdleThreads: threads a burst left idle are ended, the main
// thread is not, and the program still runs (and can start threads) after.
// Keep makes the idle threads (12 at once).
func TestShedEndsIdleThreads(t *testing.T) {
	const n = 12
	Keep(n)
	// Shed is for a quiet process: let the goroutines end and their
	// threads park (no deadline asserted; a thread not yet parked only
	// makes Shed end fewer).
	time.Sleep(20 * time.Millisecond)
	before := tasks()
	ended := Shed(2 * n)
	after := tasks()
	t.Logf("threads %d -> %d, Shed reports %d ended", before, after, ended)
	if ended < n/2 || after > before-n/2 {
		t.Fatalf("Shed ended %d threads (%d -> %d); want at least %d of the %d left idle", ended, before, after, n/2, n)
	}
	// Threads are started again when needed.
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		close(done)
	}()
	<-done
}
