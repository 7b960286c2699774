package sandboxes

import (
	"context"
	"fmt"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/local"
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
	if err := snapshotVariant(cfg); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l, err := local.ListSnapshots()
	if err != nil {
		return nil, err
	}
	out := make([]SnapshotInfo, 0, len(l))
	for _, s := range l {
		out = append(out, SnapshotInfo{Name: s.Name, From: s.From, CreatedAt: s.CreatedAt, Size: s.Size})
	}
	return out, nil
}

// DeleteSnapshot removes the snapshot name (sandboxes forked from it run
// on: each has its own state). ErrNotFound if there is none.
func DeleteSnapshot(ctx context.Context, cfg Config, name string) error {
	if err := snapshotVariant(cfg); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return local.DeleteSnapshot(name)
}

func snapshotVariant(cfg Config) error {
	if v := NormalizeVariant(cfg.Variant); v != "" && v != "local" {
		return fmt.Errorf("snapshots: %w (%s): %s", ErrNotSupported, v, pauseRefusal(v))
	}
	return nil
}
