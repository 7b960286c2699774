//go:build linux

package sandboxes_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// faultyRunsc puts a runsc wrapper in front of the real one: while the file
// hang-<command> exists in the returned directory, runsc <command> sleeps
// for an hour (a wedged checkpoint or restore); while fail-<command>
// exists, it fails at once. The sandboxes created afterwards use it, with
// checkpoint and restore bounded to checkpointBoundInTests.
func faultyRunsc(t *testing.T) string {
	t.Helper()
	real, err := exec.LookPath("runsc")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := `#!/bin/sh
for a in "$@"; do
  case "$a" in
    checkpoint|restore|kill)
      [ -e "` + dir + `/fail-$a" ] && { echo "injected failure of $a" >&2; exit 1; }
      [ -e "` + dir + `/hang-$a" ] && exec sleep 3600
      break;;
  esac
done
exec ` + real + ` "$@"
`
	w := filepath.Join(dir, "runsc")
	if err := os.WriteFile(w, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CODE_SANDBOXES_RUNSC", w)
	t.Setenv("CODE_SANDBOXES_CHECKPOINT_TIMEOUT", checkpointBoundInTests.String())
	t.Setenv("CODE_SANDBOXES_STATE_DIR", t.TempDir())
	return dir
}

// checkpointBoundInTests bounds every runsc checkpoint and restore of the
// sandboxes faultyRunsc makes, the real ones as well as the wedged: an idle
// pause takes ~1.7 s (BENCHMARKS.md), several times that on a busy host.
const checkpointBoundInTests = 12 * time.Second

func setFault(t *testing.T, dir, name string, on bool) {
	t.Helper()
	f := filepath.Join(dir, name)
	if !on {
		_ = os.Remove(f)
		return
	}
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkpointsLeft lists what is in the state directory's paused/.
func checkpointsLeft(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(os.Getenv("CODE_SANDBOXES_STATE_DIR"), "paused"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// gvisorX40 creates a local gVisor sandbox (closed at the test's end) that
// holds x = 40, with a context of a few minutes for the test's calls.
func gvisorX40(t *testing.T) (*sandboxes.Sandbox, context.Context) {
	t.Helper()
	sb := newLocal(t, func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if ex := runOut(t, sb, "x = 40"); ex.Error != nil {
		t.Fatal(ex.Error)
	}
	return sb, ctx
}

// A checkpoint that hangs is abandoned at its bound: Pause answers with
// the reason, the partial checkpoint is gone, and the sandbox runs on with
// its state (and pauses fine once runsc behaves).
func TestLocalGVisorCheckpointHangs(t *testing.T) {
	requireGVisor(t)
	faults := faultyRunsc(t)
	sb, ctx := gvisorX40(t)
	setFault(t, faults, "hang-checkpoint", true)
	err := sb.Pause(ctx)
	if err == nil || !strings.Contains(err.Error(), "took longer than "+checkpointBoundInTests.String()) || !strings.Contains(err.Error(), "keeps running") {
		t.Fatalf("Pause with a hung checkpoint = %v, want it abandoned at its bound, the sandbox running", err)
	}
	if info, err := sb.Info(ctx); err != nil || info.Status != "running" {
		t.Fatalf("after an abandoned checkpoint: %q (%v), want running", info.Status, err)
	}
	if left := checkpointsLeft(t); len(left) != 0 {
		t.Errorf("partial checkpoint left on disk: %v", left)
	}
	if ex := runOut(t, sb, "x + 2"); ex.Error != nil || ex.Text() != "42" {
		t.Fatalf("x + 2 after an abandoned checkpoint = %q (%v)", ex.Text(), ex.Error)
	}
	setFault(t, faults, "hang-checkpoint", false)
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("Pause once runsc behaves: %v", err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if ex := runOut(t, sb, "x + 2"); ex.Error != nil || ex.Text() != "42" {
		t.Fatalf("x + 2 after pause and resume = %q (%v)", ex.Text(), ex.Error)
	}
}

// A checkpoint that fails and leaves an agent that can't be told to serve
// again: the sandbox is ended and Pause says why, nothing left on disk.
func TestLocalGVisorCheckpointFailsDead(t *testing.T) {
	requireGVisor(t)
	faults := faultyRunsc(t)
	sb, ctx := gvisorX40(t)
	// The quiesce goes through (its runsc kill works); then checkpoint
	// and every later runsc kill fail.
	setFault(t, faults, "hang-checkpoint", true)
	go func() {
		// Once the checkpoint runs (its image directory exists), the
		// kills fail too.
		for ctx.Err() == nil {
			if len(checkpointsLeft(t)) > 0 {
				setFault(t, faults, "fail-kill", true)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	err := sb.Pause(ctx)
	if err == nil || !strings.Contains(err.Error(), "took longer than "+checkpointBoundInTests.String()) || !strings.Contains(err.Error(), "was ended") {
		t.Fatalf("Pause = %v, want the checkpoint abandoned and the sandbox reported ended", err)
	}
	var ierr error
	for i := 0; i < 600; i++ {
		if _, ierr = sb.Info(ctx); errors.Is(ierr, sandboxes.ErrNotFound) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !errors.Is(ierr, sandboxes.ErrNotFound) {
		t.Fatalf("Info of the ended sandbox: %v, want ErrNotFound", ierr)
	}
	if left := checkpointsLeft(t); len(left) != 0 {
		t.Errorf("partial checkpoint left on disk: %v", left)
	}
}

// A restore that hangs is abandoned at its bound: the sandbox stays paused
// with its checkpoint; a caller that gives up first is told the resume
// goes on; once runsc behaves the sandbox resumes with its state.
func TestLocalGVisorRestoreHangs(t *testing.T) {
	requireGVisor(t)
	faults := faultyRunsc(t)
	sb, ctx := gvisorX40(t)
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	setFault(t, faults, "hang-restore", true)
	short, scancel := context.WithTimeout(ctx, time.Second)
	err := sb.Resume(short)
	scancel()
	if err == nil || !strings.Contains(err.Error(), "the resume goes on") {
		t.Fatalf("Resume whose caller gives up = %v, want 'the resume goes on'", err)
	}
	// The one under way holds the sandbox until its bound.
	for {
		err = sb.Resume(ctx)
		if err == nil || !strings.Contains(err.Error(), "under way") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "took longer than "+checkpointBoundInTests.String()) || !strings.Contains(err.Error(), "stays paused") {
		t.Fatalf("Resume with a hung restore = %v, want it abandoned at its bound, the sandbox paused", err)
	}
	if info, err := sb.Info(ctx); err != nil || info.Status != sandboxes.StatusPaused {
		t.Fatalf("after an abandoned restore: %q (%v), want paused", info.Status, err)
	}
	if left := checkpointsLeft(t); len(left) != 1 {
		t.Fatalf("checkpoints on disk: %v, want the paused sandbox's", left)
	}
	setFault(t, faults, "hang-restore", false)
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if ex := runOut(t, sb, "x + 2"); ex.Error != nil || ex.Text() != "42" {
		t.Fatalf("x + 2 after the resume = %q (%v)", ex.Text(), ex.Error)
	}
}

// A disk too small for the checkpoint refuses the pause before the agent is
// touched: runsc ends the sandbox on a failed checkpoint, so trying would
// lose it (a full disk did in CI).
func TestLocalGVisorPauseDiskFull(t *testing.T) {
	requireGVisor(t)
	small := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "cs-small-state", small).Run(); err != nil {
		t.Fatalf("mount a small tmpfs for the state directory: %v", err)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", small).Run() })
	t.Setenv("CODE_SANDBOXES_STATE_DIR", small)
	sb, ctx := gvisorX40(t)
	err := sb.Pause(ctx)
	if !errors.Is(err, sandboxes.ErrUnavailable) || !strings.Contains(err.Error(), "free") {
		t.Fatalf("Pause with a 2 MiB state disk: %v, want ErrUnavailable saying how much is free", err)
	}
	t.Log(err)
	if ex := runOut(t, sb, "x + 2"); ex.Error != nil || ex.Text() != "42" {
		t.Fatalf("x + 2 after the refused pause = %q (%v): the sandbox was lost", ex.Text(), ex.Error)
	}
}
