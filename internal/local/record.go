// Package local is the local variant: each sandbox is our own binary
// re-executed as the sandbox's agent inside fresh Linux namespaces, watched by
// a small detached "shim" process on the host (the conmon model), with no
// daemon. A sandbox's record and socket live in a runtime directory, so any
// process can list, reach and kill it.
package local

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
	"github.com/code-sandboxes/code-sandboxes/internal/records"
)

// record is a sandbox's state file (state.json in its directory).
type record struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Tags      map[string]string `json:"tags,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	EndAt     time.Time         `json:"end_at"`
	ShimPid   int               `json:"shim_pid"`
	ShimStart uint64            `json:"shim_start"` // /proc start time, guards against pid reuse
	AgentPid  int               `json:"agent_pid"`
	Token     string            `json:"token"`
	Network   string            `json:"network"`
	// AllowedHosts and AllowPrivate complete Network (all, allowlist); the
	// supervisor re-reads them on SIGUSR1 (UpdateNetwork).
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
	AllowPrivate bool     `json:"allow_private,omitempty"`
	DeniedHosts  []string `json:"denied_hosts,omitempty"`
	Memory       int64    `json:"memory_bytes,omitempty"`
	CPUs         float64  `json:"cpus,omitempty"`
	Pids         int64    `json:"pids,omitempty"`
	Cgroups      []string `json:"cgroups,omitempty"`
	// HostUID is the host uid (and gid) the sandbox's user maps to when
	// the caller is root: one of its own (uids.go), 0 otherwise.
	HostUID int `json:"host_uid,omitempty"`
	// NoRootUser: Options.NoRootUser, no root user even with HostUID.
	NoRootUser bool `json:"no_root_user,omitempty"`
	// Environment is what the sandbox runs on: "host" (the host's system
	// directories) or the environment name (or id) it was created with;
	// BuildID pins the build (empty for host).
	Environment string `json:"environment,omitempty"`
	BuildID     string `json:"build_id,omitempty"`
	// Isolation is "" (namespaces) or "gvisor"; Runsc is then the runsc
	// that runs it (for people reading the record: a dead supervisor's
	// sandbox is deleted with the runsc found at that time).
	Isolation string `json:"isolation,omitempty"`
	Runsc     string `json:"runsc,omitempty"`
	// Pool marks a warm-pool sandbox not yet handed out: nobody's, so
	// List, Connect and Kill by id don't see it.
	Pool bool `json:"pool,omitempty"`
	// Paused: the sandbox is a checkpoint on disk (pause.go), no process
	// runs; Remaining is what was left of its lifetime when it paused.
	Paused    bool          `json:"paused,omitempty"`
	Remaining time.Duration `json:"remaining,omitempty"`
	// Checkpoint is where a pause writes the sandbox (isolation gvisor):
	// on disk under the state directory, not in the runtime directory,
	// which is usually a tmpfs (RAM) (checkpointDirOf).
	Checkpoint string `json:"checkpoint,omitempty"`
	// AutoPause: the lifetime's end pauses the sandbox instead of killing
	// it (autopause.go); Lifetime is what a resume gives it back then.
	AutoPause bool          `json:"auto_pause,omitempty"`
	Lifetime  time.Duration `json:"lifetime,omitempty"`
	// Pausing: the lifetime's end is pausing the sandbox (its agent no
	// longer serves); it counts as paused, and Resume waits for the pause.
	Pausing bool `json:"pausing,omitempty"`
}

// paused reports whether the sandbox is paused or being auto-paused.
func (r *record) paused() bool { return r.Paused || (r.Pausing && r.alive()) }

const (
	stateFile  = "state.json"
	socketFile = "agent.sock"
)

// dirName is the name of a sandbox's directory in the runtime directory: a
// hash of its id, not the id. The agent's socket path shows in
// /proc/net/unix to every process of the network namespace (a sandbox with
// network all among them), and a sandbox id is what E2B's data plane
// routes by; the hash can't be turned back into the id.
func dirName(id string) string {
	sum := sha256.Sum256([]byte("code-sandboxes local sandbox directory\x00" + id))
	return hex.EncodeToString(sum[:16])
}

// SandboxDir is where the sandbox id keeps its record and socket under the
// runtime directory rt (for tests and tools that inspect them).
func SandboxDir(rt, id string) string { return filepath.Join(rt, dirName(id)) }

// procStart returns a process's start time in clock ticks since boot, or 0.
func procStart(pid int) uint64 {
	st, _ := procstat.Read(pid)
	return st.StartTime
}

// waitEnded waits, until deadline, for process pid started at start (its
// procStart) to be gone: no such process, another one with its pid, or a
// zombie (its exit is done; whoever started it reaps it). It reports
// whether it is. An unknown start (0) counts as ended: it was gone when
// read, and whatever has the pid now is not it.
func waitEnded(pid int, start uint64, deadline time.Time) bool {
	if start == 0 {
		return true
	}
	for {
		if procstat.Ended(pid, start) {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// alive reports whether the record's shim is still the process it was.
func (r *record) alive() bool {
	if r.ShimPid <= 0 {
		return false
	}
	st := procStart(r.ShimPid)
	return st != 0 && st == r.ShimStart
}

// runtimeDir picks where sandbox records live.
func runtimeDir(configured string) string {
	return records.RuntimeDir(configured, "CODE_SANDBOXES_RUNTIME_DIR", "code-sandboxes")
}

func ensureRuntimeDir(dir string) error { return records.EnsureDir(dir, "CODE_SANDBOXES_RUNTIME_DIR") }

func readRecord(dir string) (*record, error) {
	var r record
	if err := records.Read(filepath.Join(dir, stateFile), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// writeRecord replaces the record atomically: readers never see half a file.
func writeRecord(dir string, r *record) error { return records.Write(filepath.Join(dir, stateFile), r) }
