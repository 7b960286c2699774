package sandboxes_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/earlystart"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// TestLocalInitBinary: with cmd/code-sandboxes-init beside the sandbox
// binary, a sandbox's stage 1 runs from it and re-executes into the sandbox
// binary: the sandbox works as before (its early kernel adopted, the root
// user's sudo, hardening in place asked for), user code holds no fd of
// either binary, and a broken init fails the Create. An init that doesn't
// speak this build's protocol, isn't a file, or is less trusted than the
// sandbox binary (another owner, writable by others, a link) is refused with
// ErrInvalidConfig naming it and never run; nothing is left behind.
func TestLocalInitBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	_, err := exec.LookPath("go")
	sandboxestest.Require(t, err == nil, "the go command, to build the sandbox's binaries")
	dir := t.TempDir()
	bin := filepath.Join(dir, local.SandboxBinaryName)
	init := filepath.Join(dir, earlystart.InitName)
	for out, pkg := range map[string]string{bin: "./cmd/code-sandboxes-sandbox", init: "./cmd/code-sandboxes-init"} {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt := ownRuntimeDir(t, "cs-init-")
	cfg := sandboxes.Config{Variant: "local", Options: local.Options{RuntimeDir: rt}}
	t.Setenv(local.SandboxBinaryEnv, bin)

	// Built with a umask of 002 (Debian's default for users): both
	// group-writable, by the same group. The init is as trusted as the
	// sandbox binary, and used.
	for _, p := range []string{bin, init} {
		if err := os.Chmod(p, 0o775); err != nil {
			t.Fatal(err)
		}
	}
	// Stage 1 from the init, hardening in place asked for or not (the init
	// must re-execute either way: it can't go on as the agent).
	for _, reexec := range []string{"", "0"} {
		t.Setenv(local.ReexecEnv, reexec)
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			t.Fatalf("%s=%q: Create: %v", local.ReexecEnv, reexec, err)
		}
		// The default kernel (started by stage 1) runs the code; no fd of
		// the binaries (their execute-only copies) reached it.
		ex, err := sb.RunCode(ctx, `import os
fds = []
for f in os.listdir('/proc/self/fd'):
    try:
        fds.append(os.readlink('/proc/self/fd/' + f))
    except OSError:
        pass
print(os.getppid(), [p for p in fds if 'exe' in p or 'code-sandboxes' in p])`)
		if err != nil || ex.Error != nil || strings.TrimSpace(ex.Stdout()) != "1 []" {
			t.Errorf("%s=%q: the kernel: %v %v %v (want its parent the agent, pid 1, and no binary's fd)", local.ReexecEnv, reexec, ex.Stdout(), ex.Error, err)
		}
		if os.Geteuid() == 0 {
			// Sudo is the sandbox binary (stage 1 binds ExeFD's, not its own).
			res, err := sb.Commands().Run(ctx, "sudo id -u")
			if res == nil || strings.TrimSpace(res.Stdout) != "0" {
				t.Errorf("%s=%q: sudo id -u: %+v %v", local.ReexecEnv, reexec, res, err)
			}
		}
		recs := poolRecords(t, rt)
		if len(recs) != 1 {
			t.Fatalf("%d records", len(recs))
		}
		runsCopyOf(t, recs[0].AgentPid, bin)
		if err := sb.Close(); err != nil {
			t.Error(err)
		}
	}
	t.Setenv(local.ReexecEnv, "")

	// A broken init that still reports the right fingerprint: Create fails,
	// so stage 1 does run it.
	fp, err := exec.Command("env", "CODE_SANDBOXES_ROLE=fingerprint", init).Output()
	if err != nil {
		t.Fatal(err)
	}
	broken := "#!/bin/sh\nif [ \"$CODE_SANDBOXES_ROLE\" = fingerprint ]; then echo " + strings.TrimSpace(string(fp)) + "; exit 0; fi\necho broken init >&2\nexit 3\n"
	if err := os.Remove(init); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(init, []byte(broken), 0o755); err != nil {
		t.Fatal(err)
	}
	if sb, err := sandboxes.Create(ctx, cfg); err == nil {
		sb.Close()
		t.Errorf("a broken %s: Create worked, so stage 1 did not run it", earlystart.InitName)
	} else if errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "isolate:") {
		t.Errorf("a broken %s: %v, want the sandbox's start to fail, not the check", earlystart.InitName, err)
	}

	// One of another build (a fingerprint of its own), and one that isn't
	// a file: refused with what to do.
	if err := os.WriteFile(init+".new", []byte("#!/bin/sh\necho 0123456789abcdef01234567\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(init+".new", init); err != nil {
		t.Fatal(err)
	}
	if sb, err := sandboxes.Create(ctx, cfg); err == nil {
		sb.Close()
		t.Errorf("a stale %s: Create worked", earlystart.InitName)
	} else if !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), earlystart.InitName) || !strings.Contains(err.Error(), "rebuild") {
		t.Errorf("a stale %s: %v, want ErrInvalidConfig naming it and saying to rebuild", earlystart.InitName, err)
	}
	if err := os.Remove(init); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(init, 0o755); err != nil {
		t.Fatal(err)
	}
	if sb, err := sandboxes.Create(ctx, cfg); err == nil {
		sb.Close()
		t.Errorf("a directory as %s: Create worked", earlystart.InitName)
	} else if !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), earlystart.InitName) {
		t.Errorf("a directory as %s: %v, want ErrInvalidConfig naming it", earlystart.InitName, err)
	}

	// One others may write, or (as root) another user's: it would run
	// every sandbox's setup with every capability there, so it must be as
	// trusted as the sandbox binary beside it.
	if err := os.Remove(init); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(init, []byte(broken), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(init, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	untrusted := func(what, want string) {
		t.Helper()
		if sb, err := sandboxes.Create(ctx, cfg); err == nil {
			sb.Close()
			t.Errorf("%s %s: Create worked", what, earlystart.InitName)
		} else if !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s %s: %v, want ErrInvalidConfig saying %q", what, earlystart.InitName, err, want)
		}
	}
	untrusted("a group-writable (the sandbox binary is not)", "no less trusted")
	if os.Geteuid() == 0 {
		if err := os.Chmod(init, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(init, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		untrusted("another user's", "no less trusted")
	}
	// A link (in a shared directory it could name any system binary, which
	// the check would run as the caller).
	if err := os.Remove(init); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/true", init); err != nil {
		t.Fatal(err)
	}
	untrusted("a link as", "symbolic link")

	// Without one the sandbox binary runs stage 1 itself, as before.
	if err := os.Remove(init); err != nil {
		t.Fatal(err)
	}
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("without %s: %v", earlystart.InitName, err)
	}
	if ex, err := sb.RunCode(ctx, "6 * 7"); err != nil || ex.Text() != "42" {
		t.Errorf("without %s: RunCode: %v %v", earlystart.InitName, ex, err)
	}
	if err := sb.Close(); err != nil {
		t.Error(err)
	}
	if ents, _ := os.ReadDir(rt); len(ents) != 0 {
		t.Errorf("%d entries left in the runtime directory", len(ents))
	}
}
