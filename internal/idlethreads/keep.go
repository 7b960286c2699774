// Package idlethreads starts OS threads ahead of need.
package idlethreads

import (
	"runtime"
	"sync"
)

// Keep starts n OS threads and leaves them idle in the runtime's list, where
// they stay for reuse (the runtime never ends an idle thread). A process
// whose pids limit may be exhausted by others (a sandbox's agent under a
// fork bomb) uses them for blocking syscalls instead of failing to create
// a thread, which the runtime treats as fatal.
func Keep(n int) {
	var locked, unlocked sync.WaitGroup
	hold := make(chan struct{})
	for range n {
		locked.Add(1)
		unlocked.Add(1)
		go func() {
			defer unlocked.Done()
			// Locked goroutines each need their own thread (all n are
			// held at once); unlocking returns it to the idle list.
			runtime.LockOSThread()
			locked.Done()
			<-hold
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	close(hold)
	unlocked.Wait()
}
