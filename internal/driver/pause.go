package driver

import "context"

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
