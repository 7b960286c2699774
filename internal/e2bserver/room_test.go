//go:build linux

package e2bserver

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/testcgroup"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

const roomChildEnv = "CS_SERVE_ROOM_CHILD"

// TestCreateWithoutRoom: a serve whose cgroup has no process ids left
// for another sandbox answers POST /sandboxes with 503 and Retry-After
// (the limit to raise in its log), not a 500 from a start that died
// half-way; the
// sandboxes it already runs go on. serve runs in a child of this test, in
// a cgroup with pids.max 200 made for it (TestCreateWithoutRoomChild).
func TestCreateWithoutRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	needSandboxes(t)
	testdep.Require(t, os.Geteuid() == 0, "root (to make a pids cgroup)")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := testcgroup.New(t, "pids")
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("200"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	script := fmt.Sprintf("echo $$ > %s && exec %s -test.run='^TestCreateWithoutRoomChild$' -test.v", filepath.Join(dir, "cgroup.procs"), exe)
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Env = append(os.Environ(), roomChildEnv+"=1", "GOMAXPROCS=2") // a thread per core would eat the room
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCreateWithoutRoomChild") {
		t.Fatalf("child: %v", err)
	}
}

// TestCreateWithoutRoomChild is TestCreateWithoutRoom's child.
func TestCreateWithoutRoomChild(t *testing.T) {
	if os.Getenv(roomChildEnv) == "" {
		t.Skip("run by TestCreateWithoutRoom")
	}
	var logged lockedBuffer
	_, base := testServer(t, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
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
		if !strings.Contains(r.Message, "no room") {
			t.Fatalf("the 503 doesn't say why: %q", r.Message)
		}
		// The tenant is told no more than that; the operator's log has the
		// limit, the numbers and what to raise.
		if strings.Contains(r.Message, "pids") || strings.Contains(r.Message, "/sys/") {
			t.Fatalf("the 503 shows the tenant the host's limits: %q", r.Message)
		}
		log := logged.String()
		if !strings.Contains(log, "pids.max") || !strings.Contains(log, "raise") {
			t.Fatalf("the log doesn't name the limit and what to do:\n%s", log)
		}
		if strings.Contains(log, "likely why") {
			t.Fatalf("refused only after a start failed half-way:\n%s", log)
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

// lockedBuffer is a bytes.Buffer safe for the server's goroutines to log to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
