package sandboxes_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// TestLocalSandboxBinary: with CODE_SANDBOXES_SANDBOX_BINARY naming
// cmd/code-sandboxes-sandbox, a sandbox's supervisor and agent are that
// binary, not the caller re-executed, and the sandbox works; a binary that
// doesn't speak this build's protocol (another program, another build) or
// isn't an absolute path is refused with ErrInvalidConfig and leaves
// nothing behind.
func TestLocalSandboxBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	_, err := exec.LookPath("go")
	sandboxestest.Require(t, err == nil, "the go command, to build cmd/code-sandboxes-sandbox")
	dir := t.TempDir()
	bin := filepath.Join(dir, "code-sandboxes-sandbox")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/code-sandboxes-sandbox").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := ownRuntimeDir(t, "cs-pool-")
	cfg := sandboxes.Config{Variant: "local", Options: local.Options{RuntimeDir: rt}}

	t.Setenv(local.SandboxBinaryEnv, bin)
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if ex, err := sb.RunCode(ctx, "6 * 7"); err != nil || ex.Text() != "42" {
		t.Errorf("RunCode: %v %v", ex, err)
	}
	if os.Geteuid() == 0 {
		// The sandbox's sudo is the sandbox binary too (bound in by stage 1).
		res, err := sb.Commands().Run(ctx, "sudo id -u")
		if res == nil || strings.TrimSpace(res.Stdout) != "0" {
			t.Errorf("sudo id -u: %+v %v", res, err)
		}
	}
	recs := poolRecords(t, rt)
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(recs[0].ShimPid) + "/exe"); err != nil || exe != bin {
		t.Errorf("the supervisor runs %q (%v), want %s", exe, err, bin)
	}
	runsCopyOf(t, recs[0].AgentPid, bin)
	if err := sb.Close(); err != nil {
		t.Error(err)
	}

	script := filepath.Join(dir, "other")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 0123456789abcdef01234567\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	// The same through local.Options.SandboxBinary, which wins over the
	// environment.
	t.Setenv(local.SandboxBinaryEnv, script)
	ocfg := cfg
	setLocal(&ocfg, func(o *local.Options) { o.SandboxBinary = bin })
	sb, err = sandboxes.Create(ctx, ocfg)
	if err != nil {
		t.Fatalf("Create with local.Options.SandboxBinary: %v", err)
	}
	if recs := poolRecords(t, rt); len(recs) != 1 {
		t.Errorf("%d records", len(recs))
	} else {
		runsCopyOf(t, recs[0].AgentPid, bin)
	}
	if err := sb.Close(); err != nil {
		t.Error(err)
	}
	t.Setenv(local.SandboxBinaryEnv, "")
	setLocal(&ocfg, func(o *local.Options) { o.SandboxBinary = script })
	if sb, err := sandboxes.Create(ctx, ocfg); err == nil {
		sb.Close()
		t.Errorf("local.Options.SandboxBinary=%s: Create worked", script)
	} else if !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "local.Options.SandboxBinary") || !strings.Contains(err.Error(), "rebuild") {
		t.Errorf("local.Options.SandboxBinary=%s: %v, want ErrInvalidConfig naming it and saying to rebuild", script, err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, []byte("#!/bin/sh\nexec head -c 10000000 /dev/zero\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{script, "/bin/true", huge, "relative/path"} {
		t.Setenv(local.SandboxBinaryEnv, p)
		sb, err := sandboxes.Create(ctx, cfg)
		if err == nil {
			sb.Close()
			t.Errorf("%s: Create worked", p)
			continue
		}
		if !errors.Is(err, sandboxes.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", p, err)
		}
		if !strings.Contains(err.Error(), local.SandboxBinaryEnv) {
			t.Errorf("%s: %v does not name %s", p, err, local.SandboxBinaryEnv)
		}
	}
	if ents, _ := os.ReadDir(rt); len(ents) != 0 {
		t.Errorf("%d entries left in the runtime directory", len(ents))
	}
}

// runsCopyOf checks that pid (a sandbox's agent) runs an execute-only copy
// of bin (isolate.Spec.ExecOnlyDir), which nothing in the sandbox can read.
func runsCopyOf(t *testing.T, pid int, bin string) {
	t.Helper()
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(exe)
	if err != nil || fi.Mode().Perm() != 0o111 {
		t.Errorf("the agent runs %s (%v, %v), want an execute-only copy of %s", exe, fi.Mode(), err, bin)
		return
	}
	if os.Geteuid() != 0 {
		return // only root reads an execute-only file
	}
	a, errA := os.ReadFile(exe)
	b, errB := os.ReadFile(bin)
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		t.Errorf("the agent runs %s, not a copy of %s (%v %v)", exe, bin, errA, errB)
	}
}
