// Reading /proc for the sections: a sandbox's threads, processes, CPU,
// scheduler counters and memory, and the host's.

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// sandboxThreads counts the threads and processes of every sandbox in rt.
func sandboxThreads(rt string) (threads, procs int) {
	for _, pid := range sandboxPids(rt) {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		threads += len(tasks)
		procs++
	}
	return threads, procs
}

// roleThreads counts the threads of every sandbox's processes by what
// each process is (its argv[0]: the supervisor, the agent, the root user's
// broker; anything else, the Python kernel, by its name).
type roleThreads map[string]int

func sandboxThreadsByRole(rt string) roleThreads {
	r := roleThreads{}
	for _, pid := range sandboxPids(rt) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		name := filepath.Base(strings.SplitN(string(b), "\x00", 2)[0])
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		r[name] += len(tasks)
	}
	return r
}

// format lists the roles, most threads first, per sandbox of n.
func (r roleThreads) format(n int) string {
	names := make([]string, 0, len(r))
	for k := range r {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		return r[names[i]] > r[names[j]] || r[names[i]] == r[names[j]] && names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("`%s` %.1f", k, float64(r[k])/float64(n))
	}
	return strings.Join(parts, ", ")
}

// sandboxPids lists the processes of every sandbox in rt: each shim (from
// its record) and its process tree.
func sandboxPids(rt string) []int {
	var pids []int
	ents, _ := os.ReadDir(rt)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(rt, e.Name(), "state.json"))
		if err != nil {
			continue
		}
		var r struct {
			ShimPid int `json:"shim_pid"`
		}
		_ = json.Unmarshal(b, &r)
		pids = append(pids, tree(r.ShimPid)...)
	}
	return pids
}

// hostMemory returns MemAvailable (bytes), the pages the kernel's reclaim
// has scanned since boot (the pgscan_* counters) and the page faults the
// host has taken since boot (pgfault).
func hostMemory() (avail, scanned, faults int64) {
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				avail = kb << 10
			}
		}
	}
	if b, err := os.ReadFile("/proc/vmstat"); err == nil {
		for l := range strings.Lines(string(b)) {
			f := strings.Fields(l)
			if len(f) != 2 {
				continue
			}
			n, _ := strconv.ParseInt(f[1], 10, 64)
			switch {
			case strings.HasPrefix(f[0], "pgscan_"):
				scanned += n
			case f[0] == "pgfault":
				faults = n
			}
		}
	}
	return avail, scanned, faults
}

// selfCPU is this process's user and system CPU time so far, in ms.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

// sandboxCPU is the on-CPU time (ms) of the threads of the sandbox whose
// directory is dir: its supervisor and every process under it.
func sandboxCPU(dir string) float64 {
	ms, _ := sandboxSched(dir)
	return ms
}

// sandboxSched is sandboxCPU and how many times those threads were
// scheduled in: wake-ups, which a busy VM's stolen time doesn't move.
func sandboxSched(dir string) (ms, runs float64) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return 0, 0
	}
	var r struct {
		ShimPid int `json:"shim_pid"`
	}
	if json.Unmarshal(b, &r) != nil || r.ShimPid <= 0 {
		return 0, 0
	}
	for _, pid := range tree(r.ShimPid) {
		m, n := procSched(pid)
		ms += m
		runs += n
	}
	return ms, runs
}

// procSched is the on-CPU time (ms) of a process's threads so far and how
// many times they were scheduled in (a kernel thread: just its own).
func procSched(pid int) (ms, runs float64) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	ns := 0.0
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		// schedstat: ns on the CPU, ns waiting for it, times run.
		if f := strings.Fields(string(b)); len(f) > 2 {
			v, _ := strconv.ParseFloat(f[0], 64)
			n, _ := strconv.ParseFloat(f[2], 64)
			ns += v
			runs += n
		}
	}
	return ns / 1e6, runs
}

// hostTasks counts the threads of every process on the host.
func hostTasks() int {
	n := 0
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		tasks, _ := os.ReadDir("/proc/" + p.Name() + "/task")
		n += len(tasks)
	}
	return n
}

// selfTasks counts this process's threads.
func selfTasks() int {
	tasks, _ := os.ReadDir("/proc/self/task")
	return len(tasks)
}

func tree(root int) []int {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		// children is per thread: a Go parent forks from any of its threads.
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if p, err := strconv.Atoi(f); err == nil {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// pss returns a process's proportional set size in KiB.
func pss(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Pss:") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}
