package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCLISandboxBinaryBeside: the CLI runs its sandboxes' processes from the
// code-sandboxes-sandbox beside it (as make build ships them), and refuses
// a stale one (another build's protocol) with what to do.
func TestCLISandboxBinaryBeside(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	t.Setenv("CODE_SANDBOXES_SANDBOX_BINARY", "") // cli() passes our environment on
	lean := filepath.Join(filepath.Dir(bin), "code-sandboxes-sandbox")
	out, errs, code := cli(t, "", "create", "--lifetime", "5m")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	defer cli(t, "", "delete", "-y", id)
	found := false
	ents, _ := os.ReadDir(runtime)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(runtime, e.Name(), "state.json"))
		if err != nil {
			continue
		}
		var r struct {
			ID       string `json:"id"`
			ShimPid  int    `json:"shim_pid"`
			AgentPid int    `json:"agent_pid"`
		}
		if err := json.Unmarshal(b, &r); err != nil || r.ID != id {
			continue
		}
		found = true
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(r.ShimPid) + "/exe"); err != nil || exe != lean {
			t.Errorf("the supervisor runs %q (%v), want %s", exe, err, lean)
		}
		// The agent runs an execute-only copy of it (isolate.Spec.ExecOnlyDir).
		exe, err := os.Readlink("/proc/" + strconv.Itoa(r.AgentPid) + "/exe")
		fi, serr := os.Stat(exe)
		if err != nil || serr != nil || fi.Mode().Perm() != 0o111 {
			t.Errorf("the agent runs %q (%v %v), want an execute-only copy of %s", exe, err, serr, lean)
		} else if os.Geteuid() == 0 {
			a, errA := os.ReadFile(exe)
			b, errB := os.ReadFile(lean)
			if errA != nil || errB != nil || !bytes.Equal(a, b) {
				t.Errorf("the agent runs %s, not a copy of %s (%v %v)", exe, lean, errA, errB)
			}
		}
	}
	if !found {
		t.Fatalf("no record of %s in %s", id, runtime)
	}

	// A stale lean binary: a copy of the CLI beside one that speaks
	// another protocol.
	dir := t.TempDir()
	stale := filepath.Join(dir, "code-sandboxes")
	if out, err := exec.Command("cp", bin, stale).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "code-sandboxes-sandbox"), []byte("#!/bin/sh\necho 0123456789abcdef01234567\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(stale, "exec", "1 + 1")
	cmd.Env = append(os.Environ(), "CODE_SANDBOXES_RUNTIME_DIR="+runtime, "CODE_SANDBOXES_SANDBOX_BINARY=")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "rebuild") || !strings.Contains(string(b), "code-sandboxes-sandbox") {
		t.Errorf("a stale sandbox binary beside the CLI: %v %q, want a refusal saying to rebuild it", err, b)
	}
}
