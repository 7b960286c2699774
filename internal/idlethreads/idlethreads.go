// Package idlethreads gives back the OS threads that a Go program's busy
// start left idle.
//
// The runtime never ends an idle thread (an M parked with nothing to run):
// every blocking syscall that outlasted a few microseconds while the
// program started (a fork, a pipe read, a file write) got a thread to run
// the scheduler meanwhile, and that thread stays, parked, for the process's
// life. A sandbox's supervisor starts busily and then only sleeps for as
// long as its sandbox lives; on a host running a thousand sandboxes each
// idle thread is a thousand pids and kernel stacks, and every sandbox's
// start calls pivot_root, which walks every thread on the host (issue 17).
package idlethreads

import (
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Shed ends up to limit of the runtime's idle threads and reports how many
// it ended. Call it once the process has gone quiet; a thread it ends that
// is needed again later is simply started again (a clone: tens of µs).
//
// It relies on runtime.LockOSThread's documented contract: a goroutine that
// exits without unlocking takes its thread with it. Such a goroutine runs
// on the thread that holds the scheduler when Shed blocks; when that thread
// ends, the scheduler moves to an idle thread if there is one, else to a
// new one (no loss: one thread ended, one started), so Shed stops after a
// few attempts in a row that leave the count of threads where it was. The
// main thread is never ended (the runtime would park it for good instead):
// Shed keeps it aside, locked, while it works.
func Shed(limit int) int {
	// One P while it works: with more, the exiting goroutine's thread may
	// hand its P to no one (another thread is already looking for work),
	// and which thread runs what is no longer the sequence above.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	self := os.Getpid()
	release := make(chan struct{})
	defer close(release)
	ended, misses, pinned := 0, 0, false
	for ended < limit {
		before := tasks()
		if before < 0 {
			return ended
		}
		res := make(chan int, 1)
		go func() {
			runtime.LockOSThread()
			tid := unix.Gettid()
			if tid == self {
				res <- 0
				<-release
				runtime.UnlockOSThread()
				return
			}
			res <- tid
			// Returns still locked: the runtime ends this thread.
		}()
		tid := <-res
		if tid == 0 {
			if pinned {
				return ended // can't happen: a locked thread runs only its goroutine
			}
			pinned = true
			continue
		}
		if !gone(tid) {
			return ended
		}
		if tasks() >= before {
			// No idle thread took over (or something else started one
			// meanwhile): the attempt cost nothing but a thread's start,
			// so a few more are tried before giving up.
			if misses++; misses == 3 {
				return ended
			}
			continue
		}
		ended, misses = ended+1, 0
	}
	return ended
}

// tasks counts this process's threads (-1: unknown).
func tasks() int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return -1
	}
	return len(ents)
}

// gone waits (a bounded while) for thread tid to have exited: it ends just
// after its goroutine, once it has handed the scheduler on.
func gone(tid int) bool {
	p := "/proc/self/task/" + strconv.Itoa(tid)
	for range 200 {
		if _, err := os.Stat(p); os.IsNotExist(err) {
			return true
		}
		time.Sleep(50 * time.Microsecond)
	}
	return false
}
