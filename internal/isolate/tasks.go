//go:build linux

package isolate

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
)

// SandboxTasks is about how many tasks (processes and threads: each takes a
// process id) an idle sandbox holds: its supervisor's and agent's threads,
// the root broker's and the kernel (17.5 in bench's scale section).
const SandboxTasks = 20

// startTasks is what the room check asks for: a start briefly holds more
// than an idle sandbox (its stage processes, threads for blocking calls).
const startTasks = 32

// TaskLimitError says which limit on tasks a new sandbox would run into.
// Every task takes a process id, so the limits are the kernel's
// (kernel.pid_max, kernel.threads-max) and the pids.max of the cgroups the
// sandbox is created beneath. Started anyway, a sandbox fails half-way (its
// processes can't make threads: a Go runtime ends then), and the sandboxes
// already running can't start commands.
type TaskLimitError struct {
	Limit     string // "kernel.pid_max", "kernel.threads-max", or a cgroup's pids.max file
	Used, Max int64
	Reserve   int64  // what a new sandbox must leave free under Max
	Fix       string // what the operator can do besides closing sandboxes
}

func (e *TaskLimitError) Error() string {
	return fmt.Sprintf("%d tasks (processes and threads) in use of %s %d; a sandbox holds about %d, and %d stay free for what already runs. Close sandboxes, or %s",
		e.Used, e.Limit, e.Max, SandboxTasks, e.Reserve, e.Fix)
}

// taskReserve is how much of a limit a new sandbox must leave free: the
// sandboxes already running need tasks for their commands (and the
// creator for its threads), which a table filled to the brim would refuse.
func taskReserve(max int64) int64 { return max / 32 }

// reservedPIDs: once its pids have wrapped around, the kernel gives new
// tasks pids from 300 up only (RESERVED_PIDS), so at most pid_max - 300
// tasks hold pids above it; counting all tasks against that is at most 300
// tasks early.
const reservedPIDs = 300

// taskRoom reports whether need more tasks fit under max with used in use,
// leaving reserve.
func taskRoom(used, max, reserve, need int64) bool { return used+need+reserve <= max }

// initPIDNSIno is the inode of the initial pid namespace (the kernel's
// PROC_PID_INIT_INO): every other pid namespace has another.
const initPIDNSIno = 0xEFFFFFFC

// CheckTaskRoom reports a *TaskLimitError when this process (the creator:
// the sandbox's supervisor and cgroup go beneath it) has no room for one
// more sandbox's tasks under the kernel's limits or its cgroups' pids.max.
// It reads a few files (the kernel's thread count, two sysctls, the pids
// files of the creator's cgroup and its ancestors): about 20 µs.
func CheckTaskRoom() error { return checkTaskRoom(startTasks) }

// TaskShortage is CheckTaskRoom after a start failed: whether the failure
// was likely for want of tasks. The failed start has already given its
// tasks back, so it asks for room for two.
func TaskShortage() error { return checkTaskRoom(2 * startTasks) }

// TaskHeadroom is how many more tasks sandboxes may take before
// CheckTaskRoom refuses, and the limit that decides it; ok is false when
// no limit could be read.
func TaskHeadroom() (n int64, limit string, ok bool) {
	for _, l := range taskLimits(0) {
		if free := l.Max - l.Reserve - l.Used; !ok || free < n {
			n, limit, ok = free, l.Limit, true
		}
	}
	return n, limit, ok
}

func checkTaskRoom(need int64) error {
	for _, l := range taskLimits(need) {
		if !taskRoom(l.Used, l.Max, l.Reserve, need) {
			return l
		}
	}
	return nil
}

// taskLimits reads the limits on this process's tasks and what is in use
// under each (need: what a check asks for, which decides whether a pid
// namespace's tasks are worth counting).
func taskLimits(need int64) []*TaskLimitError {
	var out []*TaskLimitError
	if threads, ok := hostThreads(); ok {
		if max, ok := readInt("/proc/sys/kernel/threads-max"); ok {
			out = append(out, &TaskLimitError{Limit: "kernel.threads-max", Used: threads, Max: max, Reserve: taskReserve(max),
				Fix: "raise it (sysctl -w kernel.threads-max=N)"})
		}
		if max, ok := readInt("/proc/sys/kernel/pid_max"); ok {
			used := threads
			if threads > max && !initialPIDNS() {
				// More tasks on the host than this pid_max allows: it is this
				// pid namespace's own (Linux 6.14+), lower than the host's.
				// Count what the namespace holds. (A namespace's pid_max
				// as the host's, the common case in containers, is the
				// host's limit, and the host's count the one to check.)
				n, ok := pidNSTasks(max)
				if !ok {
					n = 0 // /proc is not this namespace's: can't tell
				}
				used = n
			}
			out = append(out, &TaskLimitError{Limit: "kernel.pid_max", Used: used, Max: max, Reserve: taskReserve(max) + reservedPIDs,
				Fix: "raise it (sysctl -w kernel.pid_max=4194304, the most a 64-bit kernel allows)"})
		}
	}
	for _, dir := range pidsCgroups() {
		max, ok1 := readInt(filepath.Join(dir, "pids.max")) // "max": no limit here
		cur, ok2 := readInt(filepath.Join(dir, "pids.current"))
		if ok1 && ok2 {
			out = append(out, &TaskLimitError{Limit: filepath.Join(dir, "pids.max"), Used: cur, Max: max, Reserve: taskReserve(max),
				Fix: "raise that cgroup's pids limit (TasksMax= of a systemd unit, docker run --pids-limit, a pod's pid limit), or create sandboxes from a cgroup without one"})
		}
	}
	return out
}

// hostThreads is the number of tasks on the host: /proc/loadavg's
// "running/total" field counts them all, whatever namespace reads it.
func hostThreads() (int64, bool) {
	b, err := readSmall("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, false
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(total, 10, 64)
	return n, err == nil
}

func initialPIDNS() bool {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return true // no namespaces to tell apart
	}
	return st.Ino == initPIDNSIno
}

// pidNSTasks counts the tasks of this process's pid namespace (and those
// beneath it, which take pids in it too) from /proc, when /proc is this
// namespace's (its "self" is our pid in it). It stops counting once past
// limit: by then the answer is known.
func pidNSTasks(limit int64) (int64, bool) {
	if self, err := os.Readlink("/proc/self"); err != nil || self != strconv.Itoa(os.Getpid()) {
		return 0, false
	}
	d, err := os.Open("/proc")
	if err != nil {
		return 0, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, false
	}
	var n int64
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if st, ok := procstat.Read(pid); ok {
			n += int64(max(st.Threads, 1)) // a zombie has none, and still its pid
		}
		if n > limit {
			break
		}
	}
	return n, true
}

func readInt(path string) (int64, bool) {
	b, err := readSmall(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// pidsCgroups are this process's cgroup and its ancestors that have a
// pids.max (v1's pids hierarchy, else v2), nearest first, up to the
// hierarchy's root. On v2 a cgroup has the file only where its parent
// enabled the controller, so one without it is passed over, not the end:
// an ancestor's limit (a user slice's TasksMax) still counts. Found once:
// a process rarely moves, and reading mountinfo on every Create would cost
// more than the rest of the check.
var pidsCgroups = sync.OnceValue(func() []string {
	fsys, err := detectCgroups()
	if err != nil {
		return nil
	}
	start := fsys.v1["pids"]
	if start == "" {
		start = fsys.v2
	}
	var dirs []string
	// Every cgroup directory, the hierarchy's root too, has cgroup.procs;
	// above the root there is none.
	for dir := start; dir != "" && dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			break
		}
		if _, err := os.Stat(filepath.Join(dir, "pids.max")); err == nil {
			dirs = append(dirs, dir)
		}
	}
	return dirs
})

// readSmall reads a small file (a /proc or cgroup value) in one read,
// without os.File's poller registration: the room check runs on every
// Create, and the registration was a third of its cost.
func readSmall(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var buf [128]byte
	n, err := syscall.Read(fd, buf[:])
	if err != nil {
		return nil, err
	}
	return buf[:max(n, 0)], nil
}
