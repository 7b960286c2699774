package driver

import (
	"context"
	"time"
)

// Pauser is an Instance whose sandbox can be paused (its whole state
// checkpointed to disk, nothing running) and resumed under the same id.
// A variant or isolation level that can't answers ErrNotSupported with
// the reason.
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// Snapshotter is an Instance whose state can be kept under a name
// (Spec.Snapshot then creates sandboxes from it: forks).
type Snapshotter interface {
	Snapshot(ctx context.Context, name string) error
}

// SnapshotStore is a variant that keeps snapshots (Snapshotter's) apart
// from any sandbox: listed oldest first, deleted by name (ErrNotFound if
// there is none).
type SnapshotStore interface {
	ListSnapshots(ctx context.Context, spec Spec) ([]SnapshotInfo, error)
	DeleteSnapshot(ctx context.Context, spec Spec, name string) error
}

// SnapshotInfo describes a kept snapshot.
type SnapshotInfo struct {
	Name      string
	From      string // the id of the sandbox it was taken of
	CreatedAt time.Time
	Size      int64 // bytes on disk (its checkpoint)
}
