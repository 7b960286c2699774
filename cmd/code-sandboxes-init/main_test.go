package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// TestInitStaysSmall: this binary exists to start faster than the sandbox
// binary (stage 1 is the one Go start left on a cold start's path before
// python's), which it does only while it links none of the agent's
// protocol, HTTP or network stacks. A bare run of it measured 1.08 ms of
// CPU and 235 page faults against the sandbox binary's 2.1 ms and 495
// (perf stat -r 40, GOMAXPROCS=1).
func TestInitStaysSmall(t *testing.T) {
	_, err := exec.LookPath("go")
	testdep.Require(t, err == nil, "the go command")
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, heavy := range []string{
		"net/http",
		"google.golang.org/protobuf/",
		"gvisor.dev/",
		"connectrpc.com/",
		"log/slog",
		"github.com/code-sandboxes/code-sandboxes/internal/agent",
		"github.com/code-sandboxes/code-sandboxes/internal/local",
		"github.com/code-sandboxes/code-sandboxes/internal/envd",
	} {
		for _, p := range deps {
			if p == heavy || strings.HasPrefix(p, heavy+"/") || (strings.HasSuffix(heavy, "/") && strings.HasPrefix(p, heavy)) {
				t.Errorf("code-sandboxes-init links %s (through internal/earlystart): keep stage 1's code apart from the agent's", p)
				break
			}
		}
	}
}
