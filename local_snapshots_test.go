//go:build linux

package sandboxes_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// Snapshot names are paths under the state directory: anything that could
// leave it (or reach a temporary directory) is refused before any file is
// touched.
func TestSnapshotNamesRefused(t *testing.T) {
	state := t.TempDir()
	t.Setenv("CODE_SANDBOXES_STATE_DIR", state)
	victim := filepath.Join(state, "paused", "victim")
	if err := os.MkdirAll(filepath.Join(state, "snapshots"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := localConfig(t)
	for _, name := range []string{"", "..", ".", "../paused/victim", "a/b", "/etc", ".tmp-x", "-x", "x\x00", "x y", strings.Repeat("a", 65), "..%2f"} {
		if err := sandboxes.DeleteSnapshot(ctx, cfg, name); !errors.Is(err, sandboxes.ErrInvalidConfig) {
			t.Errorf("DeleteSnapshot(%q): %v, want ErrInvalidConfig", name, err)
		}
		c := cfg
		c.Snapshot = name
		if name == "" {
			continue // no snapshot: an ordinary create
		}
		if sb, err := sandboxes.Create(ctx, c); !errors.Is(err, sandboxes.ErrInvalidConfig) {
			if sb != nil {
				_ = sb.Close()
			}
			t.Errorf("Create from snapshot %q: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("a refused name reached %s: %v", victim, err)
	}
	if err := sandboxes.DeleteSnapshot(ctx, cfg, "nosuch"); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("DeleteSnapshot of a missing one: %v, want ErrNotFound", err)
	}
	// A directory without a snapshot's metadata is not a snapshot.
	if err := os.Mkdir(filepath.Join(state, "snapshots", "half"), 0o700); err != nil {
		t.Fatal(err)
	}
	if l, err := sandboxes.ListSnapshots(ctx, cfg); err != nil || len(l) != 0 {
		t.Errorf("ListSnapshots: %+v %v, want none", l, err)
	}
	if err := sandboxes.DeleteSnapshot(ctx, cfg, "half"); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("DeleteSnapshot of a directory that isn't a snapshot: %v, want ErrNotFound", err)
	}
	c := cfg
	c.Variant = "docker"
	if _, err := sandboxes.ListSnapshots(ctx, c); !errors.Is(err, sandboxes.ErrNotSupported) {
		t.Errorf("ListSnapshots on docker: %v, want ErrNotSupported", err)
	}
}

// List and delete: a snapshot is listed with its source and size until it
// is deleted; taking "x" leaves the snapshot "x.tmp" alone (its temporary
// directory was "x.tmp" before).
func TestLocalGVisorSnapshotListDelete(t *testing.T) {
	requireGVisor(t)
	t.Setenv("CODE_SANDBOXES_STATE_DIR", t.TempDir())
	sb := newLocal(t, func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor })
	ctx := context.Background()
	cfg := localConfig(t)
	if ex := runOut(t, sb, "x = 40"); ex.Error != nil {
		t.Fatal(ex.Error)
	}
	for _, n := range []string{"x.tmp", "x"} {
		if err := sb.Snapshot(ctx, n); err != nil {
			t.Fatalf("Snapshot %s: %v", n, err)
		}
	}
	l, err := sandboxes.ListSnapshots(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 2 || l[0].Name != "x.tmp" || l[1].Name != "x" {
		t.Fatalf("ListSnapshots: %+v, want x.tmp then x", l)
	}
	for _, s := range l {
		if s.From != sb.ID() || s.Size <= 0 || s.CreatedAt.IsZero() {
			t.Errorf("snapshot %+v: want From %s, a size and a time", s, sb.ID())
		}
	}
	if err := sandboxes.DeleteSnapshot(ctx, cfg, "x"); err != nil {
		t.Fatal(err)
	}
	if err := sandboxes.DeleteSnapshot(ctx, cfg, "x"); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	c := cfg
	c.Snapshot = "x"
	if sb2, err := sandboxes.Create(ctx, c); !errors.Is(err, sandboxes.ErrNotFound) {
		if sb2 != nil {
			_ = sb2.Close()
		}
		t.Errorf("fork of a deleted snapshot: %v, want ErrNotFound", err)
	}
	c.Snapshot = "x.tmp"
	fork, err := sandboxes.Create(ctx, c)
	if err != nil {
		t.Fatalf("fork of x.tmp: %v", err)
	}
	defer fork.Close()
	if ex := runOut(t, fork, "x + 2"); ex.Text() != "42" {
		t.Errorf("x + 2 in the fork: %q", ex.Text())
	}
	if err := sandboxes.DeleteSnapshot(ctx, cfg, "x.tmp"); err != nil {
		t.Fatal(err)
	}
	if l, _ := sandboxes.ListSnapshots(ctx, cfg); len(l) != 0 {
		t.Errorf("after deleting both: %+v", l)
	}
}
