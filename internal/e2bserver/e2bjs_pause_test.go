package e2bserver

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// TestOfficialJSSDKPause: the official SDK's pause, connect, snapshots,
// fork and lifecycle against serve --isolation gvisor
// (e2e/e2bjs/pause.test.mjs).
func TestOfficialJSSDKPause(t *testing.T) {
	needGVisorServe(t)
	node, npm := needNode(t)
	npmCI(t, npm)
	_, url := testServer(t, Options{Config: sandboxes.Config{Isolation: sandboxes.IsolationGVisor}})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	rep := runNodeScript(ctx, t, node, "pause.test.mjs", url)
	step := func(name string, v any) {
		t.Helper()
		raw, ok := rep.Steps[name]
		if !ok {
			t.Fatalf("step %s missing", name)
		}
		var thrown struct{ Thrown, Message string }
		_ = json.Unmarshal(raw, &thrown)
		if thrown.Thrown != "" {
			t.Fatalf("step %s threw %s: %s", name, thrown.Thrown, thrown.Message)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("step %s: %v: %s", name, err, raw)
		}
	}
	var st struct{ Pid int }
	step("state", &st)
	var p struct {
		Paused, Again, Running bool
		State                  string
	}
	step("pause", &p)
	if !p.Paused || p.Again || p.Running || p.State != "paused" {
		t.Errorf("pause: %+v, want paused true, a second pause false, not running, state paused", p)
	}
	var c struct {
		SameID, Running bool
		X, File         string
		Pids            []int
	}
	step("connect", &c)
	if !c.SameID || !c.Running || c.X != "42" || c.File != "before" || !slices.Contains(c.Pids, st.Pid) {
		t.Errorf("connect: %+v, want the same sandbox running, x + 2 = 42, the file, and pid %d", c, st.Pid)
	}
	var sn struct {
		SnapshotID   string
		Names        []string
		Running      bool
		Listed, Mine []string
	}
	step("snapshot", &sn)
	if sn.SnapshotID == "" || len(sn.Names) == 0 || !strings.Contains(sn.Names[0], "e2e-snap") || !sn.Running ||
		!slices.Contains(sn.Listed, sn.SnapshotID) || !slices.Contains(sn.Mine, sn.SnapshotID) {
		t.Errorf("snapshot: %+v", sn)
	}
	var fs struct{ ID, X, Original string }
	step("fromSnapshot", &fs)
	if fs.ID == "" || fs.X != "42" || fs.Original != "before" {
		t.Errorf("sandbox from the snapshot: %+v, want x + 2 = 42 and the original's file untouched", fs)
	}
	var fk struct {
		Forks []struct {
			ID, X, File, Error string
			Running            bool
		}
		Source string
	}
	step("fork", &fk)
	if len(fk.Forks) != 2 || fk.Source != "40" {
		t.Fatalf("fork: %+v", fk)
	}
	for _, f := range fk.Forks {
		if f.Error != "" || !f.Running || f.X != "42" || f.File != "before" {
			t.Errorf("fork %+v", f)
		}
	}
	var del struct {
		First, Second bool
		Listed        int
	}
	step("deleteSnapshot", &del)
	if !del.First || del.Second || del.Listed != 0 {
		t.Errorf("deleteSnapshot: %+v, want true then false, none listed", del)
	}
	var ap struct {
		Lifecycle struct {
			OnTimeout  string
			AutoResume bool
		}
		State, After, Y string
		Running         bool
	}
	step("autoPause", &ap)
	if ap.Lifecycle.OnTimeout != "pause" || ap.State != "paused" || ap.Running || ap.After != "running" || ap.Y != "2" {
		t.Errorf("autoPause: %+v, want onTimeout pause, paused at the timeout, running after connect, y + 1 = 2", ap)
	}
	for _, name := range []string{"keepMemoryFalse", "pauseKeepMemoryFalse"} {
		var r struct{ Refused, Message string }
		step(name, &r)
		if r.Refused == "" || !strings.Contains(r.Message, "filesystem-only") {
			t.Errorf("%s: %+v, want refused naming the filesystem-only pause", name, r)
		}
	}
}
