package sandboxes

import (
	"context"
	"fmt"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
)

// SnapshotInfo describes a snapshot kept by Sandbox.Snapshot.
type SnapshotInfo struct {
	Name      string
	From      string // the id of the sandbox it was taken of
	CreatedAt time.Time
	Size      int64 // bytes on disk (its checkpoint)
}

// ListSnapshots lists the snapshots of cfg's variant, oldest first. Only
// the local variant keeps snapshots; the others answer ErrNotSupported.
func ListSnapshots(ctx context.Context, cfg Config) ([]SnapshotInfo, error) {
	st, spec, err := snapshotStore(cfg)
	if err != nil {
		return nil, err
	}
	l, err := st.ListSnapshots(ctx, spec)
	if err != nil {
		return nil, err
	}
	out := make([]SnapshotInfo, 0, len(l))
	for _, s := range l {
		out = append(out, SnapshotInfo(s))
	}
	return out, nil
}

// DeleteSnapshot removes the snapshot name (sandboxes forked from it run
// on: each has its own state). ErrNotFound if there is none.
func DeleteSnapshot(ctx context.Context, cfg Config, name string) error {
	st, spec, err := snapshotStore(cfg)
	if err != nil {
		return err
	}
	return st.DeleteSnapshot(ctx, spec, name)
}

func snapshotStore(cfg Config) (driver.SnapshotStore, driver.Spec, error) {
	v, spec, err := cfg.variant()
	if err != nil {
		return nil, spec, err
	}
	st, ok := v.(driver.SnapshotStore)
	if !ok {
		return nil, spec, fmt.Errorf("snapshots: %w (%s): %s", ErrNotSupported, v.Name(), pauseRefusal(v.Name()))
	}
	return st, spec, nil
}
