package sandboxes

import (
	"context"
	"fmt"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
)

// StatusPaused is Info.Status of a paused sandbox.
const StatusPaused = "paused"

// Pause checkpoints the whole sandbox — its processes, kernels and their
// variables, memory and files — to disk and ends its processes: a paused
// sandbox costs no memory and its lifetime clock stops. Resume brings it
// back under the same id. The local variant pauses sandboxes created with
// isolation gvisor and network none (gVisor's checkpoint), the e2b variant
// through E2B's API (pause, then connect to resume); everything else
// answers ErrNotSupported with the reason. If ctx ends during a pause, the
// pause goes on: the sandbox ends up paused or running (Info says which),
// never half.
func (s *Sandbox) Pause(ctx context.Context) error {
	p, err := s.pauser()
	if err != nil {
		return err
	}
	return p.Pause(ctx)
}

// Resume restores a paused sandbox under the same id, with the same state;
// this handle (and any other, and the same token) works again.
func (s *Sandbox) Resume(ctx context.Context) error {
	p, err := s.pauser()
	if err != nil {
		return err
	}
	return p.Resume(ctx)
}

func (s *Sandbox) pauser() (driver.Pauser, error) {
	if _, err := s.conn(); err != nil {
		return nil, err
	}
	p, ok := s.inst.(driver.Pauser)
	if !ok {
		return nil, fmt.Errorf("pause: %w (%s): %s", ErrNotSupported, s.variant.Name(), pauseRefusal(s.variant.Name()))
	}
	return p, nil
}

// pauseRefusal says why a variant can't pause.
func pauseRefusal(variant string) string {
	switch variant {
	case "docker":
		return "docker's checkpoint is experimental and needs CRIU, which fails on current kernels; use the local variant with isolation gvisor"
	case "kubernetes":
		return "Kubernetes has no pod checkpoint that restores (only forensic container checkpoints); use the local variant with isolation gvisor"
	}
	return "this variant has no checkpoint; use the local variant with isolation gvisor"
}

// Snapshot keeps the sandbox's whole state under name (the sandbox is
// paused for as long as it takes, then runs on). Create with
// Config.Snapshot = name starts a new sandbox from it, as many times as
// wanted: a fork. Local variant (isolation gvisor and network none) and
// e2b variant (an E2B snapshot, a template of that name); ErrNotSupported
// with the reason elsewhere.
func (s *Sandbox) Snapshot(ctx context.Context, name string) error {
	if _, err := s.conn(); err != nil {
		return err
	}
	p, ok := s.inst.(driver.Snapshotter)
	if !ok {
		return fmt.Errorf("snapshot: %w (%s): %s", ErrNotSupported, s.variant.Name(), pauseRefusal(s.variant.Name()))
	}
	return p.Snapshot(ctx, name)
}
