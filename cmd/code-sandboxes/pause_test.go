package main

import (
	"strings"
	"testing"
)

// pause, resume, snapshot and fork from the CLI under gVisor; pause of a
// namespaces sandbox is refused naming gvisor.
func TestPauseCommands(t *testing.T) {
	requireGVisor(t)
	t.Setenv("CODE_SANDBOXES_STATE_DIR", t.TempDir()) // cli() passes our environment on
	out, errs, code := cli(t, "", "create", "--lifetime", "5m")
	plain := strings.TrimSpace(out)
	if code != 0 || plain == "" {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	defer cli(t, "", "delete", "-y", plain)
	if _, errs, code = cli(t, "", "pause", plain); code == 0 || !strings.Contains(errs, "gvisor") {
		t.Fatalf("pause of a namespaces sandbox: %d %q, want a refusal naming gvisor", code, errs)
	}
	out, errs, code = cli(t, "", "create", "--isolation", "gvisor", "--lifetime", "5m")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create --isolation gvisor: %d %q %q", code, out, errs)
	}
	defer cli(t, "", "delete", "-y", id)
	if out, errs, code = cli(t, "", "exec", "--sandbox", id, "x = 40"); code != 0 {
		t.Fatalf("exec: %d %q %q", code, out, errs)
	}
	if out, errs, code = cli(t, "", "pause", id); code != 0 || !strings.Contains(out, "paused "+id) {
		t.Fatalf("pause: %d %q %q", code, out, errs)
	}
	if out, _, _ = cli(t, "", "get", id); !strings.Contains(out, "paused") {
		t.Fatalf("get of a paused sandbox: %q", out)
	}
	if out, errs, code = cli(t, "", "resume", id); code != 0 {
		t.Fatalf("resume: %d %q %q", code, out, errs)
	}
	if out, errs, code = cli(t, "", "snapshot", id, "cli-snap"); code != 0 {
		t.Fatalf("snapshot: %d %q %q", code, out, errs)
	}
	out, errs, code = cli(t, "", "fork", "cli-snap")
	fork := strings.TrimSpace(out)
	if code != 0 || fork == "" || fork == id {
		t.Fatalf("fork: %d %q %q", code, out, errs)
	}
	defer cli(t, "", "delete", "-y", fork)
	if out, errs, code = cli(t, "", "exec", "--sandbox", fork, "print(x + 2)"); code != 0 || strings.TrimSpace(out) != "42" {
		t.Fatalf("exec in the fork: %d %q %q", code, out, errs)
	}
	if out, errs, code = cli(t, "", "snapshots"); code != 0 || !strings.Contains(out, "cli-snap") || !strings.Contains(out, id) {
		t.Fatalf("snapshots: %d %q %q", code, out, errs)
	}
	if _, errs, code = cli(t, "", "snapshot", "rm", "../cli-snap"); code == 0 || !strings.Contains(errs, "snapshot name") {
		t.Fatalf("snapshot rm ../cli-snap: %d %q, want refused", code, errs)
	}
	if out, errs, code = cli(t, "", "snapshot", "rm", "cli-snap"); code != 0 || !strings.Contains(out, "deleted cli-snap") {
		t.Fatalf("snapshot rm: %d %q %q", code, out, errs)
	}
	if out, _, _ = cli(t, "", "snapshots"); strings.Contains(out, "cli-snap") {
		t.Fatalf("snapshots after rm: %q", out)
	}
}
