package docker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// A sandbox's host-side directory, <runtime dir>/<id> (0700):
//
//	record.json   the record (0600): token, end of life, what labels can't change
//	run/          bind-mounted at /run/code-sandboxes in the container:
//	  config.json   the agent's config, written by us, deleted by the agent on start
//	  agent.sock    the agent's socket
//
// The record sits beside run/, not in it, so the token never enters the
// container's view; run/ is root-owned 0755, so code in the sandbox (uid 1000)
// can't replace the socket.
const (
	recordFile = "record.json"
	runSubdir  = "run"
)

// record is what the host keeps about a sandbox beyond its labels: labels
// are fixed at creation, but SetTimeout moves the end.
type record struct {
	ID    string `json:"id"`
	Token string `json:"token"`
	// Engine is the engine's address: a runtime dir shared by processes
	// using different engines must not have one sweep the other's sandboxes.
	Engine    string    `json:"engine"`
	CreatedAt time.Time `json:"created_at"`
	EndAt     time.Time `json:"end_at"`
}

// idRE matches the ids we hand out; anything else found in labels or the
// runtime directory is not ours to touch.
var idRE = regexp.MustCompile(`^d[a-z0-9]{16}$`)

// runtimeDir picks where sandbox directories live:
// $CODE_SANDBOXES_DOCKER_RUNTIME_DIR, else /run/code-sandboxes-docker for
// root, else under $XDG_RUNTIME_DIR or the temp dir. It must be on the
// engine's host: run/ is bind-mounted from it.
func runtimeDir() string {
	if d := os.Getenv("CODE_SANDBOXES_DOCKER_RUNTIME_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/run/code-sandboxes-docker"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "code-sandboxes-docker")
	}
	return filepath.Join(os.TempDir(), "code-sandboxes-docker-"+strconv.Itoa(os.Getuid()))
}

func ensureRuntimeDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("runtime directory %s: %w", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("runtime directory %s is not a directory", dir)
	}
	// Another user's directory would let them reach our records (tokens).
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("runtime directory %s is owned by uid %d, not by us (uid %d); set CODE_SANDBOXES_DOCKER_RUNTIME_DIR", dir, sys.Uid, os.Geteuid())
	}
	return nil
}

func readRecord(dir string) (*record, error) {
	f, err := os.Open(filepath.Join(dir, recordFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r record
	if err := json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&r); err != nil {
		return nil, fmt.Errorf("corrupt sandbox record in %s: %w", dir, err)
	}
	return &r, nil
}

// writeRecord replaces the record atomically: readers never see half a file.
func writeRecord(dir string, r *record) error {
	return writeFileAtomic(filepath.Join(dir, recordFile), r)
}

func writeFileAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	// CreateTemp makes 0600 files: the record and the agent config hold the
	// token.
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// removeSandboxDir deletes a sandbox's host directory, but only one that
// looks like ours: the directory was found through a container's mount,
// and a container someone else labelled must not make us delete an
// arbitrary path.
func removeSandboxDir(dir, id string) error {
	if dir == "" || !idRE.MatchString(id) || filepath.Base(dir) != id {
		return nil
	}
	r, err := readRecord(dir)
	switch {
	case err == nil && r.ID == id:
	case errors.Is(err, os.ErrNotExist) && filepath.Dir(dir) == runtimeDir():
		// Debris of a create that died before writing the record.
	default:
		return nil // not provably ours: leave it for a human
	}
	return os.RemoveAll(dir)
}
