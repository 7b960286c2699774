//go:build linux

package isolate

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// SandboxMemory is about what an idle sandbox keeps of the host's memory:
// 8.8 MiB of MemAvailable per sandbox in bench's scale section (its
// processes' own pages and the kernel's for them), rounded up.
const SandboxMemory = 10 << 20

// What a start asks the room check for: a start briefly holds more than an
// idle sandbox (its stage processes, threads for blocking calls, the
// kernel's imports before they settle).
const (
	startTasks  = 32
	startMemory = 32 << 20
)

// RoomError says which limit a new sandbox would run into: on tasks (each
// takes a process id: kernel.pid_max, kernel.threads-max, the pids.max of
// the cgroups the sandbox is created beneath) or on memory (the host's,
// the memory limit of those cgroups). Started anyway, a sandbox fails
// half-way (its processes can't make threads: a Go runtime ends then) or
// pushes the host or the creator's cgroup into the OOM killer, and the
// sandboxes already running can't start commands.
type RoomError struct {
	Memory    bool   // a limit on memory (bytes); else on tasks
	Limit     string // "kernel.pid_max", "kernel.threads-max", "MemAvailable", or a cgroup's limit file
	Used, Max int64
	Reserve   int64  // what a new sandbox must leave free under Max
	Need      int64  // what the refused start asked for
	Fix       string // what the operator can do besides closing sandboxes
}

func (e *RoomError) Error() string {
	if e.Memory {
		return fmt.Sprintf("%d MiB in use of %s %d MiB; a start asks for %d MiB (an idle sandbox keeps about %d), and %d MiB stay free for what already runs. Close sandboxes, or %s",
			e.Used>>20, e.Limit, e.Max>>20, e.Need>>20, SandboxMemory>>20, e.Reserve>>20, e.Fix)
	}
	return fmt.Sprintf("%d tasks (processes and threads) in use of %s %d; a start asks for %d (an idle sandbox holds about %d), and %d stay free for what already runs. Close sandboxes, or %s",
		e.Used, e.Limit, e.Max, e.Need, SandboxTasks, e.Reserve, e.Fix)
}

// room reports whether need more fit under the limit, leaving its reserve;
// when not, the error says need was asked for.
func (e *RoomError) room(need int64) bool {
	e.Need = need
	return e.Used+need+e.Reserve <= e.Max
}

// taskReserve is how much of a limit a new sandbox must leave free: the
// sandboxes already running need tasks for their commands (and the
// creator for its threads), which a table filled to the brim would refuse.
func taskReserve(max int64) int64 { return max / 32 }

// memReserve is the same for a cgroup's memory limit: a sandbox's kernel
// grows as its code runs, and the creator needs some too.
func memReserve(limit int64) int64 { return max(limit/32, 16<<20) }

// hostMemReserve is the same for the host's memory: 1/32, from 64 MiB up to
// 1 GiB (what a sandbox needs doesn't grow with the host).
func hostMemReserve(total int64) int64 { return min(max(total/32, 64<<20), 1<<30) }

// reservedPIDs: once its pids have wrapped around, the kernel gives new
// tasks pids from 300 up only (RESERVED_PIDS), so at most pid_max - 300
// tasks hold pids above it; counting all tasks against that is at most 300
// tasks early.
const reservedPIDs = 300

// initPIDNSIno is the inode of the initial pid namespace (the kernel's
// PROC_PID_INIT_INO): every other pid namespace has another.
const initPIDNSIno = 0xEFFFFFFC

// CheckRoom reports a *RoomError when this process (the creator: the
// sandbox's supervisor and cgroup go beneath it) has no room for one more
// sandbox: its tasks under the kernel's limits or its cgroups' pids.max,
// its memory under the host's MemAvailable or its cgroups' memory limit.
// It reads a few small files (the kernel's thread count, two sysctls,
// meminfo, the limit files of the creator's cgroups and their ancestors,
// memory.stat only where a memory limit is set): 20 µs for the task limits
// on a quiet 2-core VM, about 100 with memory's while CI ran beside it.
func CheckRoom() error { return checkRoom(startTasks, startMemory) }

// RoomShortage is CheckRoom after a start failed: whether the failure was
// likely for want of room. The failed start has already given back what
// it took, so it asks for room for two.
func RoomShortage() error { return checkRoom(2*startTasks, 2*startMemory) }

// TaskHeadroom is how many more tasks sandboxes may take before CheckRoom
// refuses, and the limit that decides it; ok is false when no limit could
// be read.
func TaskHeadroom() (n int64, limit string, ok bool) { return headroom(taskLimits()) }

// MemoryHeadroom is the same for memory, in bytes.
func MemoryHeadroom() (n int64, limit string, ok bool) { return headroom(memLimits()) }

func headroom(ls []*RoomError) (n int64, limit string, ok bool) {
	for _, l := range ls {
		if free := l.Max - l.Reserve - l.Used; !ok || free < n {
			n, limit, ok = free, l.Limit, true
		}
	}
	return n, limit, ok
}

func checkRoom(tasks, mem int64) error {
	for _, l := range taskLimits() {
		if !l.room(tasks) {
			return l
		}
	}
	for _, l := range memLimits() {
		if !l.room(mem) {
			return l
		}
	}
	return nil
}

// taskLimits reads the limits on this process's tasks and what is in use
// under each.
func taskLimits() []*RoomError {
	var out []*RoomError
	if threads, ok := hostThreads(); ok {
		if max, ok := readInt("/proc/sys/kernel/threads-max"); ok {
			out = append(out, &RoomError{Limit: "kernel.threads-max", Used: threads, Max: max, Reserve: taskReserve(max),
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
			out = append(out, &RoomError{Limit: "kernel.pid_max", Used: used, Max: max, Reserve: taskReserve(max) + reservedPIDs,
				Fix: "raise it (sysctl -w kernel.pid_max=4194304, the most a 64-bit kernel allows)"})
		}
	}
	for _, dir := range pidsCgroups() {
		max, ok1 := readInt(filepath.Join(dir, "pids.max")) // "max": no limit here
		cur, ok2 := readInt(filepath.Join(dir, "pids.current"))
		if ok1 && ok2 {
			out = append(out, &RoomError{Limit: filepath.Join(dir, "pids.max"), Used: cur, Max: max, Reserve: taskReserve(max),
				Fix: "raise that cgroup's pids limit (TasksMax= of a systemd unit, docker run --pids-limit, a pod's pid limit), or create sandboxes from a cgroup without one"})
		}
	}
	return out
}

// memLimits reads the limits on memory that a new sandbox counts against
// and what is in use under each:
//   - the host's: what can't be had without the OOM killer is MemTotal less
//     MemAvailable (the kernel's estimate of what it can give without
//     swapping), less free swap (anonymous pages can go there), less what
//     ZFS's cache would give back (not in MemAvailable);
//   - the memory limit of the creator's cgroup and its ancestors (a
//     container's --memory), where the sandboxes' cgroups are charged too:
//     what a cgroup holds that can't be reclaimed, i.e. not page cache
//     (other than tmpfs) nor reclaimable kernel caches, since a container
//     that has read many files sits at its limit with them.
func memLimits() []*RoomError {
	var out []*RoomError
	if m, ok := hostMemory(); ok {
		used := max(m.total-m.avail-m.swapFree-zfsARCReclaimable(), 0)
		out = append(out, &RoomError{Memory: true, Limit: "the host's memory (MemTotal; used: less MemAvailable and free swap)", Used: used, Max: m.total, Reserve: hostMemReserve(m.total),
			Fix: "free memory on the host"})
	}
	for _, c := range memCgroups() {
		// The limit first: without one (v2's "max", v1's about 2^63) the
		// usage is not read, which for v1's root sums the whole host's.
		max, ok := readInt(filepath.Join(c.dir, c.maxFile))
		if !ok || max >= 1<<62 {
			continue
		}
		used, ok := cgroupMemUsed(c)
		if !ok {
			continue
		}
		out = append(out, &RoomError{Memory: true, Limit: filepath.Join(c.dir, c.maxFile), Used: used, Max: max, Reserve: memReserve(max),
			Fix: "raise that cgroup's memory limit (MemoryMax= of a systemd unit, docker run --memory, a pod's memory limit), or create sandboxes from a cgroup without one"})
	}
	return out
}

// cgroupMemUsed is what a cgroup holds that reclaim can't free: v2's
// memory.current less page cache (file) other than tmpfs (shmem) and less
// reclaimable slab; v1's anonymous memory and tmpfs (total_rss,
// total_shmem: its usage also counts kernel memory it has no line for).
func cgroupMemUsed(c memCgroup) (int64, bool) {
	st := memStat(filepath.Join(c.dir, "memory.stat"), c.v2)
	if !c.v2 {
		rss, ok1 := st["total_rss"]
		shmem, ok2 := st["total_shmem"]
		return rss + shmem, ok1 && ok2
	}
	cur, ok := readInt(filepath.Join(c.dir, "memory.current"))
	if !ok {
		return 0, false
	}
	free := st["file"] - st["shmem"] + st["slab_reclaimable"]
	return cur - min(max(free, 0), cur), true
}

type meminfo struct{ total, avail, swapFree int64 }

// hostMemory reads MemTotal, MemAvailable and SwapFree (bytes) from
// /proc/meminfo.
func hostMemory() (meminfo, bool) {
	var m meminfo
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return m, false
	}
	var got int
	for line := range strings.Lines(string(b)) {
		k, v, found := strings.Cut(line, ":")
		var dst *int64
		switch k {
		case "MemTotal":
			dst = &m.total
		case "MemAvailable":
			dst = &m.avail
		case "SwapFree":
			dst = &m.swapFree
		}
		f := strings.Fields(v)
		if !found || dst == nil || len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		*dst = n << 10 // kB
		if got++; got == 3 {
			break
		}
	}
	return m, got == 3 && m.total > 0
}

// zfsARCReclaimable is what ZFS's cache (ARC) would give back under
// pressure, which MemAvailable doesn't count: its size above its minimum.
// 0 without ZFS (the file doesn't exist: one failed open).
func zfsARCReclaimable() int64 {
	st := kstat("/proc/spl/kstat/zfs/arcstats")
	return max(st["size"]-st["c_min"], 0)
}

// memStat reads a cgroup's memory.stat ("key value" lines, bytes), at
// most 64 KiB of it: the file is the kernel's, but bounded all the same.
func memStat(path string, v2 bool) map[string]int64 {
	want := []string{"total_rss", "total_shmem"}
	if v2 {
		want = []string{"file", "shmem", "slab_reclaimable"}
	}
	return readStats(path, want, 1)
}

// kstat reads the size and c_min of ZFS's arcstats ("name type data" lines).
func kstat(path string) map[string]int64 {
	return readStats(path, []string{"size", "c_min"}, 2)
}

// readStats reads the keys want from a file of lines whose first field is
// a key and whose field col (the key's is 0) is its value, at most 64 KiB
// of it.
func readStats(path string, want []string, col int) map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) <= col || !slices.Contains(want, string(fields[0])) {
			continue
		}
		if n, err := strconv.ParseInt(string(fields[col]), 10, 64); err == nil {
			out[string(fields[0])] = n
		}
	}
	return out
}

// memCgroup is a cgroup with a memory limit file, and that file's name.
type memCgroup struct {
	dir, maxFile string
	v2           bool
}

// memCgroups are this process's cgroup and its ancestors in the memory
// hierarchy (v1's memory controller, else v2) that have a limit file,
// nearest first. Found once, as pidsCgroups.
var memCgroups = sync.OnceValue(func() []memCgroup {
	fsys, err := creatorCgroups()
	if err != nil {
		return nil
	}
	c := memCgroup{dir: fsys.v1["memory"], maxFile: "memory.limit_in_bytes"}
	if c.dir == "" {
		c = memCgroup{dir: fsys.v2, maxFile: "memory.max", v2: true}
	}
	var out []memCgroup
	for _, dir := range cgroupChain(c.dir, c.maxFile) {
		d := c
		d.dir = dir
		out = append(out, d)
	}
	return out
})

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
	fsys, err := creatorCgroups()
	if err != nil {
		return nil
	}
	start := fsys.v1["pids"]
	if start == "" {
		start = fsys.v2
	}
	return cgroupChain(start, "pids.max")
})

// creatorCgroups is detectCgroups for this process, read once for both
// room checks (pidsCgroups, memCgroups).
var creatorCgroups = sync.OnceValues(detectCgroups)

// cgroupChain is start and its ancestors that have the file, nearest
// first, up to the hierarchy's root: every cgroup directory, the root's
// too, has cgroup.procs; above the root there is none. (The root of what
// this process sees may be a container's cgroup, under a cgroup
// namespace, with limits of its own: it is not passed over.)
func cgroupChain(start, file string) []string {
	var dirs []string
	for dir := start; dir != "" && dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			break
		}
		if _, err := os.Stat(filepath.Join(dir, file)); err == nil {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

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
