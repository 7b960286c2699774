// Package procstat reads /proc/<pid>/stat, whose second field (the command
// name) may hold spaces and parentheses: the fields that follow are only
// safe to split after its last ')'.
package procstat

import (
	"os"
	"strconv"
	"strings"
)

// Stat is the part of /proc/<pid>/stat the callers need.
type Stat struct {
	State     byte   // R, S, D, Z, X, …
	PPid      int    // parent pid
	StartTime uint64 // clock ticks after boot
	// UTime and STime are the CPU time spent in user and kernel mode, in
	// clock ticks (USER_HZ, 100 a second on Linux).
	UTime, STime uint64
	// Threads is the process's number of threads (each takes a pid).
	Threads int
}

// Read returns pid's stat; ok is false when the process is gone or the file
// can't be parsed.
func Read(pid int) (Stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, false
	}
	// After the name: state(3) ppid(4) … num_threads(20) starttime(22),
	// counted from 1.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, false
	}
	st := Stat{State: f[0][0]}
	st.PPid, _ = strconv.Atoi(f[1])
	st.Threads, _ = strconv.Atoi(f[17])
	st.StartTime, _ = strconv.ParseUint(f[19], 10, 64)
	st.UTime, _ = strconv.ParseUint(f[11], 10, 64)
	st.STime, _ = strconv.ParseUint(f[12], 10, 64)
	return st, true
}

// Ended reports whether process pid has ended: no such process, a zombie
// (its exit is done; whoever started it reaps it), or, when start is not
// zero, another process that was given the pid since (its StartTime
// differs from start, the one read while it ran).
func Ended(pid int, start uint64) bool {
	st, ok := Read(pid)
	return !ok || (start != 0 && st.StartTime != start) || st.State == 'Z' || st.State == 'X'
}

// OOMScoreUserCode is the oom_score_adj of the processes a sandbox's agent
// starts (kernels, commands): under the sandbox's memory limit the OOM
// killer picks them before the agent, whose own score the supervisor lowers
// where it may. Memory that no process owns (tmpfs pages) makes the killer
// choose by the processes' small own sizes otherwise, and it could take the
// agent and with it the sandbox. User code can lower its score again only
// down to the agent's (the kernel's oom_score_adj_min), by its own choice.
const OOMScoreUserCode = 500

// OOMScoreAgent is the agent's oom_score_adj, set by its supervisor from
// outside (lowering needs CAP_SYS_RESOURCE, which a root caller has).
const OOMScoreAgent = -998

// SetOOMScoreAdj writes pid's oom_score_adj. It is a preference of the OOM
// killer, not a limit: callers may ignore a failure.
func SetOOMScoreAdj(pid, v int) error {
	return os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(strconv.Itoa(v)), 0)
}
