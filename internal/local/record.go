// Package local is the local variant: each sandbox is our own binary
// re-executed as the sandbox's agent inside fresh Linux namespaces, watched by
// a small detached "shim" process on the host (the conmon model), with no
// daemon. A sandbox's record and socket live in a runtime directory, so any
// process can list, reach and kill it.
package local

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
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
	Memory       int64    `json:"memory_bytes,omitempty"`
	CPUs         float64  `json:"cpus,omitempty"`
	Pids         int64    `json:"pids,omitempty"`
	Cgroups      []string `json:"cgroups,omitempty"`
	// HostUID is the host uid (and gid) the sandbox's user maps to when
	// the caller is root: one of its own (uids.go), 0 otherwise.
	HostUID int `json:"host_uid,omitempty"`
	// Environment is what the sandbox runs on: "host" (the host's system
	// directories) or the environment name (or id) it was created with;
	// BuildID pins the build (empty for host).
	Environment string `json:"environment,omitempty"`
	BuildID     string `json:"build_id,omitempty"`
}

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

// runtimeDir picks where sandbox records live.
func runtimeDir(configured string) string {
	if configured != "" {
		return configured
	}
	if d := os.Getenv("CODE_SANDBOXES_RUNTIME_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/run/code-sandboxes"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "code-sandboxes")
	}
	return filepath.Join(os.TempDir(), "code-sandboxes-"+strconv.Itoa(os.Getuid()))
}

func ensureRuntimeDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("runtime directory %s: %w", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	// Another user's directory (e.g. a pre-created /tmp path) would let them
	// reach our sandboxes' sockets.
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("runtime directory %s is owned by uid %d, not by us (uid %d); set CODE_SANDBOXES_RUNTIME_DIR", dir, sys.Uid, os.Geteuid())
	}
	if !st.IsDir() {
		return fmt.Errorf("runtime directory %s is not a directory", dir)
	}
	return nil
}

func readRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("corrupt sandbox record %s: %w", dir, err)
	}
	return &r, nil
}

// writeRecord replaces the record atomically: readers never see half a file.
func writeRecord(dir string, r *record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, stateFile))
}

// procStart returns a process's start time in clock ticks since boot, or 0.
func procStart(pid int) uint64 {
	st, _ := procstat.Read(pid)
	return st.StartTime
}

// alive reports whether the record's shim is still the process it was.
func (r *record) alive() bool {
	if r.ShimPid <= 0 {
		return false
	}
	st := procStart(r.ShimPid)
	return st != 0 && st == r.ShimStart
}
