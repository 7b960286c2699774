package sandboxes_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

// counterCode starts a process that counts in /tmp/count, outside the
// kernel, so that a pause must keep processes as well as variables.
const counterCode = `import subprocess
subprocess.Popen(["sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done"], start_new_session=True)
x = 40`

func readCount(t *testing.T, sb *sandboxes.Sandbox) int {
	t.Helper()
	ex := runOut(t, sb, `int(open("/tmp/count").read() or 0)`)
	if ex.Error != nil {
		t.Fatalf("reading the counter: %v", ex.Error)
	}
	n, err := strconv.Atoi(strings.TrimSpace(ex.Text()))
	if err != nil {
		t.Fatalf("counter %q: %v", ex.Text(), err)
	}
	return n
}

// sandboxCgroups are the cgroup directories the local sandbox runs in.
func sandboxCgroups(t *testing.T, id string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(local.SandboxDir(runtimeDir(t), id), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Cgroups []string `json:"cgroups"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.Cgroups
}

func TestLocalGVisorPauseResume(t *testing.T) {
	requireGVisor(t)
	sb := newLocal(t, func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if ex := runOut(t, sb, counterCode); ex.Error != nil {
		t.Fatal(ex.Error)
	}
	time.Sleep(300 * time.Millisecond)
	before := readCount(t, sb)
	cgroups := sandboxCgroups(t, sb.ID())
	if len(cgroups) == 0 {
		t.Fatal("the gVisor sandbox has no cgroup in its record")
	}
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	info, err := sb.Info(ctx)
	if err != nil || info.Status != sandboxes.StatusPaused {
		t.Fatalf("Info after Pause: status %q (%v), want paused", info.Status, err)
	}
	// Nothing runs: the cgroup runsc made for the sandbox is gone.
	for _, d := range cgroups {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s still exists while paused (%v)", d, err)
		}
	}
	list, err := sandboxes.List(ctx, localConfig(t), sandboxes.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, i := range list {
		if i.ID == sb.ID() {
			found = i.Status == sandboxes.StatusPaused
		}
	}
	if !found {
		t.Errorf("List does not show %s as paused: %+v", sb.ID(), list)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if ex := runOut(t, sb, "x + 2"); ex.Error != nil || ex.Text() != "42" {
		t.Fatalf("x + 2 after resume = %q (%v), want 42", ex.Text(), ex.Error)
	}
	after := readCount(t, sb)
	time.Sleep(300 * time.Millisecond)
	later := readCount(t, sb)
	if after < before || later <= after {
		t.Fatalf("counter: %d before the pause, %d and %d after the resume; want it to go on from where it was", before, after, later)
	}
	if info, err := sb.Info(ctx); err != nil || info.Status != "running" {
		t.Fatalf("Info after Resume: status %q (%v)", info.Status, err)
	}
}

func TestLocalPauseRefusedUnderNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sb := newLocal(t, nil)
	err := sb.Pause(context.Background())
	if !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "gvisor") {
		t.Fatalf("Pause under namespaces: %v, want ErrNotSupported naming gvisor", err)
	}
	if ex := runOut(t, sb, "1 + 1"); ex.Text() != "2" {
		t.Fatalf("the sandbox does not run on after a refused pause: %q", ex.Text())
	}
}
