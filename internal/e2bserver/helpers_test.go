package e2bserver

import (
	"context"
	"os"
	"strings"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
)

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// testServer runs a Server on 127.0.0.1:0 over a fresh runtime directory and
// tears it down (killing its sandboxes) at the end of the test. The test
// binary itself becomes each sandbox's agent: importing the sandboxes
// package makes it re-executable in that role.
func testServer(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	rt, err := os.MkdirTemp("", "cs-e2b-")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.APIKeys) == 0 && len(o.Keys) == 0 {
		o.APIKeys = []string{testKey}
	}
	o.Config.Local.RuntimeDir = rt
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := s.StartLoopback(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		// Everything the server created must be gone with it.
		cfg := sandboxes.Config{Local: sandboxes.LocalConfig{RuntimeDir: rt}}
		if left, _ := sandboxes.List(context.Background(), cfg, sandboxes.ListOptions{}); len(left) != 0 {
			var names []string
			for _, i := range left {
				names = append(names, i.ID)
				_, _ = sandboxes.Kill(context.Background(), cfg, i.ID, sandboxes.ListOptions{})
			}
			t.Errorf("sandboxes left behind: %s", strings.Join(names, ", "))
		}
		os.RemoveAll(rt)
	})
	return s, url
}

// needSandboxes skips (or, in CI, fails) when this machine can't run local
// sandboxes.
func needSandboxes(t *testing.T) {
	t.Helper()
	if err := isolate.CheckSupport(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("local sandboxes are not supported here: %v", err)
		}
		t.Skipf("local sandboxes are not supported here: %v", err)
	}
}
