package docker

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/records"
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

// writeRecord replaces the record atomically: readers never see half a file.
func writeRecord(dir string, r *record) error {
	return writeFileAtomic(filepath.Join(dir, recordFile), r)
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

// runtimeDir picks where sandbox directories live:
// $CODE_SANDBOXES_DOCKER_RUNTIME_DIR, else /run/code-sandboxes-docker for
// root, else under $XDG_RUNTIME_DIR or the temp dir. It must be on the
// engine's host: run/ is bind-mounted from it.
func runtimeDir() string {
	return records.RuntimeDir("", "CODE_SANDBOXES_DOCKER_RUNTIME_DIR", "code-sandboxes-docker")
}

func ensureRuntimeDir(dir string) error {
	return records.EnsureDir(dir, "CODE_SANDBOXES_DOCKER_RUNTIME_DIR")
}

func readRecord(dir string) (*record, error) {
	var r record
	if err := records.Read(filepath.Join(dir, recordFile), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// writeFileAtomic replaces path with v as JSON, atomically, mode 0600 (the
// record and the agent config hold the token).
func writeFileAtomic(path string, v any) error { return records.Write(path, v) }
