package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

// leanDir holds cmd/code-sandboxes-sandbox built for this run (removed at
// the end of main).
var leanDir string

// leanBinary builds cmd/code-sandboxes-sandbox once (and
// cmd/code-sandboxes-init beside it, which runs stage 1): the binary that runs
// sandboxes' own processes (CODE_SANDBOXES_SANDBOX_BINARY) instead of this
// benchmark re-executed, which links every variant and pays all their
// package inits in each of a sandbox's processes.
var leanBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "cs-bench-sandbox-")
	if err != nil {
		return "", err
	}
	leanDir = dir
	bin := filepath.Join(dir, "code-sandboxes-sandbox")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/code-sandboxes-sandbox").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/code-sandboxes-sandbox: %w: %s", err, out)
	}
	// Stage 1's small binary beside it, as make build ships them.
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "code-sandboxes-init"), "./cmd/code-sandboxes-init").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/code-sandboxes-init: %w: %s", err, out)
	}
	return bin, nil
})

// withSandboxBinary runs f with sandboxes' processes from bin ("" = this
// binary re-executed), and puts the setting back.
func withSandboxBinary(bin string, f func()) {
	old, had := os.LookupEnv(local.SandboxBinaryEnv)
	if bin == "" {
		os.Unsetenv(local.SandboxBinaryEnv)
	} else {
		os.Setenv(local.SandboxBinaryEnv, bin)
	}
	defer func() {
		if had {
			os.Setenv(local.SandboxBinaryEnv, old)
		} else {
			os.Unsetenv(local.SandboxBinaryEnv)
		}
	}()
	f()
}
