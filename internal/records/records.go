// Package records keeps the host-side state of the variants that run
// sandboxes on this machine (local, docker): where their runtime directory
// is, that it is ours, and JSON records written atomically.
package records

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// maxRecord bounds what a record read may hold.
const maxRecord = 1 << 20

// RuntimeDir is where a variant keeps its sandboxes: configured, else
// $envVar, else /run/<name> as root, else $XDG_RUNTIME_DIR/<name>, else
// <tmp>/<name>-<uid>.
func RuntimeDir(configured, envVar, name string) string {
	if configured != "" {
		return configured
	}
	if d := os.Getenv(envVar); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return filepath.Join("/run", name)
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, name)
	}
	return filepath.Join(os.TempDir(), name+"-"+strconv.Itoa(os.Getuid()))
}

// EnsureDir creates dir (0700) and checks that it is a directory of ours:
// another user's (a pre-created /tmp path) would let them reach our
// sandboxes' sockets and records, which hold tokens. envVar is named in the
// error as the way out.
func EnsureDir(dir, envVar string) error {
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
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("runtime directory %s is owned by uid %d, not by us (uid %d); set %s", dir, sys.Uid, os.Geteuid(), envVar)
	}
	return nil
}

// Read decodes the JSON record at path (at most 1 MiB) into v.
func Read(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := json.NewDecoder(io.LimitReader(f, maxRecord)).Decode(v); err != nil {
		return fmt.Errorf("corrupt record %s: %w", path, err)
	}
	return nil
}

// Write replaces the record at path atomically (readers never see half a
// file), mode 0600: records hold tokens.
func Write(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
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
	return os.Rename(tmp.Name(), path)
}
