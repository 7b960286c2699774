package cpupin

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

var (
	mu   sync.Mutex
	full unix.CPUSet // the set before Pin
	one  unix.CPUSet // {CPU()}
)

// Pin pins every thread of this process (threads made later inherit it) to
// one CPU of those it may use, chosen by key (the sandbox's id), and
// returns it. Fewer than two CPUs: nothing to gain, -1 and nil.
func Pin(key string) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if c := CPU(); c >= 0 {
		return c, nil
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return -1, fmt.Errorf("cpupin: %w", err)
	}
	allowed := cpusOf(&set)
	if len(allowed) < 2 {
		return -1, nil
	}
	cpu := pick(allowed, key)
	one.Zero()
	one.Set(cpu)
	full = set
	// Every thread: the runtime's own (sysmon, idle Ms) as well, since a
	// goroutine of the hot path may run on any M. A thread that exits
	// meanwhile is gone (ESRCH) and needs nothing. A thread the runtime
	// starts meanwhile from one not pinned yet has the full set (clone
	// copies it), so the listing is read again until it shows none new
	// (CI once saw one missed).
	done := map[int]bool{}
	for range 16 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			restore(done)
			return -1, fmt.Errorf("cpupin: %w", err)
		}
		fresh := 0
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			done[tid] = true
			fresh++
			if err := unix.SchedSetaffinity(tid, &one); err != nil && err != unix.ESRCH {
				restore(done)
				return -1, fmt.Errorf("cpupin: thread %d: %w", tid, err)
			}
		}
		if fresh == 0 {
			break
		}
	}
	pinned.Store(int64(cpu))
	return cpu, nil
}

// Away moves process pid (a kernel started before the agent pins itself)
// off the CPU Pin(key) will choose, to any other this process may use: a
// best effort, so that python's start-up and the agent's don't share one
// CPU while another idles. The kernel widens its set again once it has
// started (its hello says which set: Full).
func Away(pid int, key string) {
	var set unix.CPUSet
	if CPU() >= 0 || unix.SchedGetaffinity(0, &set) != nil {
		return
	}
	allowed := cpusOf(&set)
	if len(allowed) < 2 {
		return
	}
	away := set
	away.Clear(pick(allowed, key))
	_ = unix.SchedSetaffinity(pid, &away)
}

// Full lists the CPUs this process had before Pin, or has while it isn't
// pinned ("0,1,3"; "" if unreadable): a kernel Away moved sets it again
// once it has started, whether or not Pin went through meanwhile.
func Full() string {
	mu.Lock() // Pin sets full and pinned under it
	set, pinnedNow := full, CPU() >= 0
	mu.Unlock()
	if !pinnedNow && unix.SchedGetaffinity(0, &set) != nil {
		return ""
	}
	var b []byte
	for _, c := range cpusOf(&set) {
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(c), 10)
	}
	return string(b)
}

// Allowed lists the CPUs the calling thread may run on now, lowest first.
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("cpupin: %w", err)
	}
	return cpusOf(&set), nil
}

// cpusOf lists the CPUs in set, lowest first.
func cpusOf(set *unix.CPUSet) []int {
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

func restore(tids map[int]bool) {
	for tid := range tids {
		_ = unix.SchedSetaffinity(tid, &full)
	}
}

// Unpinned runs fn on a thread of its own with the set this process had
// before Pin: a process fn starts (clone copies the calling thread's set)
// is not narrowed to the agent's CPU. Without Pin it is just fn().
func Unpinned(fn func() error) error {
	if CPU() < 0 {
		return fn()
	}
	runtime.LockOSThread()
	if unix.SchedSetaffinity(0, &full) != nil {
		// The set changed under us (a cpuset shrank): the process starts
		// pinned, which costs it speed, never its start.
		runtime.UnlockOSThread()
		return fn()
	}
	err := fn()
	if unix.SchedSetaffinity(0, &one) == nil {
		runtime.UnlockOSThread()
	}
	// Else the thread stays locked to this goroutine, and the runtime
	// ends it with the goroutine rather than run the hot path unpinned.
	return err
}
