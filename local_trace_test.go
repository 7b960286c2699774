package sandboxes_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// TestLocalTraceTimeline: with CODE_SANDBOXES_TRACE every process of the
// start path marks its steps in the file, the sandbox's init and agent
// through an inherited fd; user code does not get that fd.
func TestLocalTraceTimeline(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	path := filepath.Join(t.TempDir(), "cs-trace-file")
	t.Setenv(trace.Env, path)
	trace.Reopen()
	t.Cleanup(func() {
		os.Unsetenv(trace.Env)
		trace.Reopen()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, localConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ex, err := sb.RunCode(ctx, "import os\n[os.readlink('/proc/self/fd/' + f) for f in os.listdir('/proc/self/fd') if os.path.exists('/proc/self/fd/' + f)]")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ex.Text(), "cs-trace-file") {
		t.Fatalf("user code holds the trace file: %s", ex.Text())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"create: start", "shim: inits done", "stage 1: seccomp loaded, re-exec", "stage 2: start", "agent: kernel start begun", "agent: reported ready", "agent: serving", "kernel: spawned", "create: healthy"} {
		if !strings.Contains(string(b), " "+step+"\n") {
			t.Errorf("no %q in the trace:\n%s", step, b)
		}
	}
}
