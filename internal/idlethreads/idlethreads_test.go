//go:build linux

package idlethreads

import (
	"runtime"
	"sync"
	"testing"
)

// TestShedEndsIdleThreads: threads a burst left idle are ended, the main
// thread is not, and the program still runs (and can start threads) after.
func TestShedEndsIdleThreads(t *testing.T) {
	const n = 12
	// n goroutines locked at once hold n threads; unlocked, the threads
	// stay in the runtime's idle list.
	var wg sync.WaitGroup
	hold := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			runtime.LockOSThread()
			wg.Done()
			<-hold
			runtime.UnlockOSThread()
		}()
	}
	wg.Wait()
	close(hold)
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
