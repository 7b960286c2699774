//go:build linux

package e2bserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/testcgroup"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

const taskRoomChildEnv = "CS_SERVE_TASKROOM_CHILD"

// TestCreateWithoutTaskRoom: a serve whose cgroup has no process ids left
// for another sandbox answers POST /sandboxes with 503, Retry-After and
// the limit to raise, not a 500 from a start that died half-way; the
// sandboxes it already runs go on. serve runs in a child of this test, in
// a cgroup with pids.max 200 made for it (TestCreateWithoutTaskRoomChild).
func TestCreateWithoutTaskRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	needSandboxes(t)
	testdep.Require(t, os.Geteuid() == 0, "root (to make a pids cgroup)")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := testcgroup.Pids(t)
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("200"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	script := fmt.Sprintf("echo $$ > %s && exec %s -test.run='^TestCreateWithoutTaskRoomChild$' -test.v", filepath.Join(dir, "cgroup.procs"), exe)
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Env = append(os.Environ(), taskRoomChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCreateWithoutTaskRoomChild") {
		t.Fatalf("child: %v", err)
	}
}

// TestCreateWithoutTaskRoomChild is TestCreateWithoutTaskRoom's child.
func TestCreateWithoutTaskRoomChild(t *testing.T) {
	if os.Getenv(taskRoomChildEnv) == "" {
		t.Skip("run by TestCreateWithoutTaskRoom")
	}
	_, base := testServer(t, Options{})
	var sbs []sandboxJSON
	for len(sbs) < 40 {
		var r struct {
			sandboxJSON
			apiError
		}
		resp := call(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","timeout":120}`, nil, &r)
		if resp.StatusCode == 201 {
			sbs = append(sbs, r.sandboxJSON)
			continue
		}
		t.Logf("%d sandboxes created, then %d: %s", len(sbs), resp.StatusCode, r.Message)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("status %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if strings.Contains(r.Message, "likely why") {
			t.Fatalf("refused only after a start failed half-way: %q", r.Message)
		}
		if !strings.Contains(r.Message, "pids.max") || !strings.Contains(r.Message, "raise") {
			t.Fatalf("the 503 doesn't name the limit and what to do: %q", r.Message)
		}
		break
	}
	if len(sbs) < 2 || len(sbs) == 40 {
		t.Fatalf("%d sandboxes created before the refusal", len(sbs))
	}
	// The ones running still start processes: the refusal kept room.
	for _, sb := range sbs {
		out := execute(t, base, sb, "import subprocess; subprocess.run(['true'], check=True); 40 + 2")
		if !strings.Contains(out, "42") {
			t.Fatalf("sandbox %s after the refusal: %s", sb.SandboxID, out)
		}
	}
}
