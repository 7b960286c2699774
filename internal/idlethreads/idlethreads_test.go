//go:build linux

package idlethreads

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestShedEndsIdleThreads: threads a burst left idle are ended, the main
// thread is not, and the program still runs (and can start threads) after.
func TestShedEndsIdleThreads(t *testing.T) {
	const n = 12
	// n goroutines locked at once hold n threads; unlocked, the threads
	// stay in the runtime's idle list.
	var locked, unlocked sync.WaitGroup
	hold := make(chan struct{})
	for range n {
		locked.Add(1)
		unlocked.Add(1)
		go func() {
			defer unlocked.Done()
			runtime.LockOSThread()
			locked.Done()
			<-hold
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	close(hold)
	// Shed is for a quiet process: let the goroutines end and their
	// threads park (no deadline asserted; a thread not yet parked only
	// makes Shed end fewer).
	unlocked.Wait()
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
