package local

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/earlystart"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/records"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// SandboxBinaryEnv names a binary to run a sandbox's own processes (the
// supervisor, the agent, the root user's broker and sudo) instead of the
// calling program: cmd/code-sandboxes-sandbox, or any program that imports
// this package (or the root one) and so dispatches the roles from its
// package inits.
//
// Every run of the binary pays every package init it links: a program that
// also links, say, the Kubernetes client pays ~10–30 ms of inits and 3–4 MiB
// of heap in each of a sandbox's three to five Go processes. A lean binary
// here keeps both to what the local variant needs.
//
// The binary must speak this build's protocol (the supervisor's spec, the
// agent's config, the record): it is asked for its fingerprint once per
// file (the answer kept in the caller's cache directory, keyed by the
// file's identity), and a mismatch fails Create with what to do.
const SandboxBinaryEnv = "CODE_SANDBOXES_SANDBOX_BINARY"

// roleFingerprint: print protocolFingerprint and exit (sandboxBinary's check).
const roleFingerprint = earlystart.RoleFingerprint

// protocolVersion is bumped when what the caller and the sandbox's
// processes exchange changes in a way the types below don't show (fd
// numbers, environment variables, file names).
const protocolVersion = 3

// protocolFingerprint identifies what the caller and a sandbox's processes
// exchange: protocolVersion and the shape (field names, types, JSON tags)
// of every message between them.
var protocolFingerprint = sync.OnceValue(func() string {
	return earlystart.Shapes(protocolVersion, shimSpec{}, shimReport{}, record{}, agentConfig{}, isolate.ConfigShape(), earlystart.State{})
})

// fingerprintTimeout bounds the run of the sandbox binary that reports its
// fingerprint.
const fingerprintTimeout = 10 * time.Second

// checkedBinary is a sandbox binary that reported a fingerprint, pinned by
// its file's identity: a replaced (another inode) or rewritten (mtime, and
// the ctime nobody can set back) binary is asked again.
type checkedBinary struct {
	Path        string `json:"path"`
	Dev         uint64 `json:"dev"`
	Ino         uint64 `json:"ino"`
	Size        int64  `json:"size"`
	MtimeNs     int64  `json:"mtime_ns"`
	CtimeNs     int64  `json:"ctime_ns"`
	Fingerprint string `json:"fingerprint"`
}

// fingerprintCache is the file, in the caller's cache directory, that
// remembers a sandbox binary that reported our fingerprint, by path and
// identity: each run of the CLI is a new process, and asking the binary
// costs it ~3 ms. "" when there is no cache directory.
func fingerprintCache(path string) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(path))
	return filepath.Join(dir, "code-sandboxes", "sandbox-binary", hex.EncodeToString(sum[:12])+".json")
}

// SandboxBinaryName is cmd/code-sandboxes-sandbox's file name, the one
// UseSandboxBinaryBeside looks for.
const SandboxBinaryName = "code-sandboxes-sandbox"

var (
	sandboxBinMu sync.Mutex
	// sandboxBinSeen: the binaries that reported our fingerprint, by path
	// (at most the three sources: an option, the environment, beside; and
	// the init binaries beside them).
	sandboxBinSeen = map[string]checkedBinary{}
	// besideBinary is UseSandboxBinaryBeside's find ("" = none).
	besideBinary string
)

// UseSandboxBinaryBeside makes a sandbox's processes run from the
// code-sandboxes-sandbox in the same directory as this program's
// executable, when there is one and neither Options.SandboxBinary nor
// SandboxBinaryEnv names another: what `make build` ships beside the CLI.
// It is checked by its fingerprint like any other: a stale one fails
// Create with what to do, never runs. Call it first thing in main.
func UseSandboxBinaryBeside() {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	if p, err := filepath.EvalSymlinks(exe); err == nil {
		exe = p
	}
	p := filepath.Join(filepath.Dir(exe), SandboxBinaryName)
	if _, err := os.Lstat(p); err != nil {
		return
	}
	sandboxBinMu.Lock()
	besideBinary = p
	sandboxBinMu.Unlock()
}

// sandboxBinary returns the binary a sandbox's processes run, once checked:
// explicit (Options.SandboxBinary), else the one SandboxBinaryEnv names,
// else UseSandboxBinaryBeside's, else this program. A check is remembered
// in this process and across processes (fingerprintCache).
func sandboxBinary(ctx context.Context, explicit string) (string, error) {
	p, source := explicit, "LocalConfig.SandboxBinary"
	if p == "" {
		p, source = os.Getenv(SandboxBinaryEnv), SandboxBinaryEnv
	}
	if p == "" {
		sandboxBinMu.Lock()
		p, source = besideBinary, "the "+SandboxBinaryName+" beside this program"
		sandboxBinMu.Unlock()
	}
	if p == "" {
		return os.Executable()
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s=%q: %w: give an absolute path", source, p, sberr.ErrInvalidConfig)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", source, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s=%q: %w: not a regular file", source, p, sberr.ErrInvalidConfig)
	}
	if err := checkBinary(ctx, p, source, st, fi.Size(), protocolFingerprint()); err != nil {
		return "", err
	}
	return p, nil
}

// initBinary returns cmd/code-sandboxes-init (earlystart.InitName) when it
// lies beside the sandbox binary exe and speaks this build's protocol, for
// the sandbox's stage 1 (isolate.Spec.InitPath); "" when there is none or
// exe is this program (a program re-executing itself has no init beside
// it). One that is there but stale fails, as a stale sandbox binary does:
// it means the two were not built together.
func initBinary(ctx context.Context, exe string) (string, error) {
	if self, err := os.Executable(); err != nil || self == exe {
		return "", nil
	}
	p := filepath.Join(filepath.Dir(exe), earlystart.InitName)
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	source := "the " + earlystart.InitName + " beside " + exe
	if err != nil {
		return "", fmt.Errorf("%s: %w", source, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %w: not a regular file (remove it, or put cmd/code-sandboxes-init's build there)", source, sberr.ErrInvalidConfig)
	}
	if err := checkBinary(ctx, p, source, st, fi.Size(), earlystart.Fingerprint()); err != nil {
		return "", err
	}
	return p, nil
}

// checkBinary checks that the binary p (found through source; st and size
// its stat) reports the fingerprint want: asked once per file identity,
// remembered in this process and across processes (fingerprintCache).
func checkBinary(ctx context.Context, p, source string, st *syscall.Stat_t, size int64, want string) error {
	mtime, ctime := statTimes(st)
	id := checkedBinary{Path: p, Dev: uint64(st.Dev), Ino: st.Ino, Size: size, MtimeNs: mtime, CtimeNs: ctime, Fingerprint: want}
	sandboxBinMu.Lock()
	defer sandboxBinMu.Unlock()
	if sandboxBinSeen[p] == id {
		return nil
	}
	cache := fingerprintCache(p)
	if cache != "" {
		var c checkedBinary
		if records.Read(cache, &c) == nil && c == id {
			sandboxBinSeen[p] = id
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, fingerprintTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p)
	cmd.Args = []string{"code-sandboxes-fingerprint"}
	cmd.Env = append(minimalHostEnv(), roleEnv+"="+roleFingerprint)
	var out bytes.Buffer
	cmd.Stdout = &limitedBuffer{buf: &out, left: 256}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s=%q: asking its protocol: %w (it must import github.com/code-sandboxes/code-sandboxes, as cmd/code-sandboxes-sandbox does)", source, p, err)
	}
	if got := strings.TrimSpace(out.String()); got != want {
		return fmt.Errorf("%s=%q: %w: it speaks protocol %q, this program %q: rebuild it from the same source as this program (make build, or go build -o %s ./cmd/%s)", source, p, sberr.ErrInvalidConfig, got, want, p, filepath.Base(p))
	}
	if len(sandboxBinSeen) >= 8 {
		clear(sandboxBinSeen)
	}
	sandboxBinSeen[p] = id
	if cache != "" && os.MkdirAll(filepath.Dir(cache), 0o700) == nil {
		_ = records.Write(cache, &id) // best effort: the next process asks again
	}
	return nil
}

// limitedBuffer keeps the first left bytes written and drops the rest.
type limitedBuffer struct {
	buf  *bytes.Buffer
	left int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > l.left {
		p = p[:l.left]
	}
	l.buf.Write(p)
	l.left -= len(p)
	return n, nil
}
