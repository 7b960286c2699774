package local

// Snapshots (isolation gvisor): a snapshot is a paused sandbox's checkpoint
// kept under a name, with what it takes to build a sandbox around it again
// (the shim spec, without the id and the token). Create from a snapshot is
// a fork: a new sandbox (new id, new token: the agent takes them from
// ctragent.IdentityFile after the restore) with the snapshot's state.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/ctragent"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/ids"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

const (
	snapshotMetaFile = "snapshot.json"
	// specFile is the shim spec a gVisor sandbox was made with, in its
	// gVisor directory (root's, 0600: it holds the token), for snapshots.
	specFile = "spec.json"
)

// snapshotName is what a snapshot's name must match; compiled on first
// use, not at the start of every sandbox process.
var snapshotName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })

type snapshotMeta struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	From      string    `json:"from"`
	Spec      shimSpec  `json:"spec"`
}

func snapshotDir(name string) (string, error) {
	if !snapshotName().MatchString(name) {
		return "", fmt.Errorf("%w: snapshot name %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", sberr.ErrInvalidConfig, name)
	}
	return filepath.Join(stateDir(), "snapshots", name), nil
}

// Snapshot keeps the sandbox's state under name: it pauses the sandbox,
// links its checkpoint into the snapshot and resumes it.
func (i *instance) Snapshot(ctx context.Context, name string) error {
	sdir, err := snapshotDir(name)
	if err != nil {
		return err
	}
	if _, err := os.Stat(sdir); err == nil {
		return fmt.Errorf("%w: snapshot %q exists; delete it first or pick another name", sberr.ErrInvalidConfig, name)
	}
	r, err := i.record()
	if err != nil {
		return err
	}
	if err := pausableRecord(r); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(i.dir(), gvisorDir, specFile))
	if err != nil {
		return fmt.Errorf("%w: sandbox %s was created before snapshots existed: %w", sberr.ErrNotSupported, i.id, err)
	}
	var spec shimSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return err
	}
	wasPaused := r.Paused
	if err := i.Pause(ctx); err != nil {
		return err
	}
	err = i.keepSnapshot(name, sdir, spec)
	if !wasPaused {
		if rerr := i.Resume(ctx); rerr != nil {
			return errors.Join(err, rerr)
		}
	}
	return err
}

func (i *instance) keepSnapshot(name, sdir string, spec shimSpec) error {
	r, err := i.record()
	if err != nil {
		return err
	}
	// What a fork needs to build a sandbox around the checkpoint; the id
	// and the token are the fork's own.
	spec.Dir, spec.Restore, spec.Image = "", false, ""
	spec.Agent.ID, spec.Agent.Token = "", ""
	spec.Record.ID, spec.Record.Token, spec.Record.Name, spec.Record.Tags = "", "", "", nil
	spec.Record.Remaining = r.Remaining
	return writeSnapshot(name, sdir, r.Checkpoint, snapshotMeta{Name: name, CreatedAt: time.Now(), From: i.id, Spec: spec})
}

// writeSnapshot keeps the checkpoint in checkpointDir and meta as the
// snapshot name, in sdir.
func writeSnapshot(name, sdir, checkpointDir string, meta snapshotMeta) error {
	if err := ensureStateDir(filepath.Dir(sdir)); err != nil {
		return err
	}
	// A name can't start with '.', so this is never another snapshot
	// (sdir+".tmp" was: the snapshot "x.tmp" of whoever took "x").
	tmp := filepath.Join(filepath.Dir(sdir), ".tmp-"+name)
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "checkpoint"), 0o700); err != nil {
		return err
	}
	ents, err := os.ReadDir(checkpointDir)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	for _, e := range ents {
		// A hard link: the resume removes the sandbox's own name only.
		dst := filepath.Join(tmp, "checkpoint", e.Name())
		if err := os.Link(filepath.Join(checkpointDir, e.Name()), dst); err != nil {
			_ = os.RemoveAll(tmp)
			return fmt.Errorf("keep snapshot %s: %w", name, err)
		}
		// The sandbox's memory: root's alone, whatever mode runsc gave
		// it (the directories above are 0700 as well).
		if err := os.Chmod(dst, 0o600); err != nil {
			_ = os.RemoveAll(tmp)
			return fmt.Errorf("keep snapshot %s: %w", name, err)
		}
	}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(tmp, snapshotMetaFile), b, 0o600); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := sealSnapshot(name, tmp, b); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return os.Rename(tmp, sdir)
}

// DeleteSnapshot removes a snapshot.
func DeleteSnapshot(name string) error {
	sdir, err := snapshotDir(name)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(sdir, snapshotMetaFile)); err != nil {
		return fmt.Errorf("snapshot %q: %w", name, sberr.ErrNotFound)
	}
	return os.RemoveAll(sdir)
}

// SnapshotInfo describes a kept snapshot.
type SnapshotInfo = driver.SnapshotInfo

// ListSnapshots is driver.SnapshotStore's (the store is the machine's).
func (Variant) ListSnapshots(ctx context.Context, _ driver.Spec) ([]SnapshotInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return ListSnapshots()
}

// DeleteSnapshot is driver.SnapshotStore's.
func (Variant) DeleteSnapshot(ctx context.Context, _ driver.Spec, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return DeleteSnapshot(name)
}

// ListSnapshots lists the snapshots kept under the state directory, oldest
// first; what isn't a complete snapshot (a temporary directory, a name
// that isn't valid) is left out.
func ListSnapshots() ([]SnapshotInfo, error) {
	dir := filepath.Join(stateDir(), "snapshots")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []SnapshotInfo
	for _, e := range ents {
		if !e.IsDir() || !snapshotName().MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), snapshotMetaFile))
		if err != nil {
			continue // being deleted
		}
		var m snapshotMeta
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		si := SnapshotInfo{Name: e.Name(), From: m.From, CreatedAt: m.CreatedAt}
		if files, err := os.ReadDir(filepath.Join(dir, e.Name(), "checkpoint")); err == nil {
			for _, f := range files {
				if fi, err := f.Info(); err == nil && fi.Mode().IsRegular() {
					si.Size += fi.Size()
				}
			}
		}
		out = append(out, si)
	}
	slices.SortFunc(out, func(a, b SnapshotInfo) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// fork creates a sandbox from a snapshot.
func (v Variant) fork(ctx context.Context, spec driver.Spec, rt, sandboxBin string) (driver.Instance, error) {
	sdir, err := snapshotDir(spec.Snapshot)
	if err != nil {
		return nil, err
	}
	// Checked before anything of it is used: its spec says what the fork
	// runs with, and runsc restores its checkpoint as root.
	b, err := readSealedSnapshot(spec.Snapshot, sdir)
	if err != nil {
		return nil, err
	}
	var meta snapshotMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("snapshot %q: %w", spec.Snapshot, err)
	}
	runsc, err := checkGVisor()
	if err != nil {
		return nil, err
	}
	exe, err := sandboxBinary(ctx, sandboxBin)
	if err != nil {
		return nil, err
	}
	if err := checkRoom(); err != nil {
		return nil, fmt.Errorf("fork snapshot %q: %w", spec.Snapshot, err)
	}
	id := ids.Sandbox('l')
	dir := filepath.Join(rt, dirName(id))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox directory: %w", err)
	}
	ss := meta.Spec
	token := ids.Token(24)
	ss.Dir, ss.Restore, ss.Image, ss.Runsc, ss.Exe = dir, true, filepath.Join(sdir, "checkpoint"), runsc, exe
	ss.Agent.ID, ss.Agent.Token = id, token
	r := &ss.Record
	r.ID, r.Token, r.Name, r.Tags, r.CreatedAt = id, token, spec.Name, spec.Tags, time.Now()
	r.Paused, r.Runsc, r.Checkpoint = true, runsc, checkpointDirOf(id)
	if r.Remaining <= 0 {
		r.Remaining = spec.Lifetime
	}
	r.AutoPause, r.Lifetime = spec.AutoPause, 0
	if spec.AutoPause {
		r.Lifetime = spec.Lifetime
	}
	if err := startShim(ctx, exe, ss); err != nil {
		if !errors.Is(err, errSupervisorStopping) {
			_ = os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("fork snapshot %q: %w", spec.Snapshot, err)
	}
	inst := newInstance(rt, id, token)
	if err := inst.waitHealthy(ctx, 30*time.Second); err != nil {
		_ = inst.Kill(context.Background())
		return nil, fmt.Errorf("fork snapshot %q: %w", spec.Snapshot, err)
	}
	// The agent takes its new identity before it serves: one left means
	// it still serves under the snapshot's token (a snapshot whose agent
	// can't read it, e.g. one made before the agent had a uid of its own).
	if _, err := os.Stat(filepath.Join(dir, gvisorDir, "run", ctragent.CtlDir, ctragent.IdentityFile)); err == nil {
		_ = inst.Kill(context.Background())
		return nil, fmt.Errorf("fork snapshot %q: %w: the restored agent did not take the fork's own id and token; take the snapshot again", spec.Snapshot, sberr.ErrUnavailable)
	}
	if err := inst.afterResume(ctx, r); err != nil {
		_ = inst.Kill(context.Background())
		return nil, fmt.Errorf("fork snapshot %q: %w", spec.Snapshot, err)
	}
	return inst, nil
}

var _ driver.Snapshotter = (*instance)(nil)
