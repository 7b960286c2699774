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
	label := fmt.Sprintf("%s=%q", source, p)
	if _, err := checkBinary(ctx, p, label, st, fi.Size(), protocolFingerprint(), "./cmd/"+SandboxBinaryName); err != nil {
		return "", err
	}
	return p, nil
}

// initBinary returns cmd/code-sandboxes-init (earlystart.InitName), as
// checked, when it lies beside the sandbox binary exe (beside the file a
// link names) and speaks this build's protocol, for the sandbox's stage 1
// (isolate.Spec.Init); nil when there is none or exe is this program (a
// program re-executing itself has no init beside it). It runs with every
// capability in the sandbox's namespaces, so it must be as trusted as exe:
// its owner exe's (or root), writable by nobody else. One that is there
// but stale or not trusted fails the Create: it means the two were not
// installed together.
func initBinary(ctx context.Context, exe string) (*checkedBinary, error) {
	if self, err := os.Executable(); err != nil || self == exe {
		return nil, nil
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	p := filepath.Join(filepath.Dir(exe), earlystart.InitName)
	label := fmt.Sprintf("the %s beside %s (%s)", earlystart.InitName, filepath.Base(exe), p)
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w (make it readable, or remove it)", label, sberr.ErrInvalidConfig, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w: not a regular file (remove it, or put cmd/%s's build there)", label, sberr.ErrInvalidConfig, earlystart.InitName)
	}
	var owner uint32
	if xi, err := os.Stat(exe); err == nil {
		if xst, ok := xi.Sys().(*syscall.Stat_t); ok {
			owner = xst.Uid
		}
	}
	if (st.Uid != owner && st.Uid != 0) || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s: %w: owned by uid %d with mode %v, but it runs every sandbox's setup: it must belong to the sandbox binary's owner (uid %d) or root and be writable by its owner alone (chown, chmod go-w; or remove it)", label, sberr.ErrInvalidConfig, st.Uid, fi.Mode().Perm(), owner)
	}
	return checkBinary(ctx, p, label, st, fi.Size(), earlystart.Fingerprint(), "./cmd/"+earlystart.InitName)
}

// checkBinary checks that the binary p (label names it and how it was
// found; st and size its stat) reports the protocol shapes (and the build:
// earlystart.Compatible), rebuilt from pkg if not: asked once per file
// identity, remembered in this process and across processes
// (fingerprintCache). It returns what was checked, for openChecked.
func checkBinary(ctx context.Context, p, label string, st *syscall.Stat_t, size int64, shapes, pkg string) (*checkedBinary, error) {
	want := earlystart.Stamp(shapes)
	mtime, ctime := statTimes(st)
	id := checkedBinary{Path: p, Dev: uint64(st.Dev), Ino: st.Ino, Size: size, MtimeNs: mtime, CtimeNs: ctime, Fingerprint: want}
	sandboxBinMu.Lock()
	defer sandboxBinMu.Unlock()
	if sandboxBinSeen[p] == id {
		return &id, nil
	}
	cache := fingerprintCache(p)
	if cache != "" {
		var c checkedBinary
		if records.Read(cache, &c) == nil && c == id {
			sandboxBinSeen[p] = id
			return &id, nil
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
		return nil, fmt.Errorf("%s: asking its protocol: %w (is it a build of %s?)", label, err, pkg)
	}
	if got := strings.TrimSpace(out.String()); !earlystart.Compatible(got, want) {
		return nil, fmt.Errorf("%s: %w: it speaks protocol %q, this program %q: rebuild it from the same source as this program (make build, or go build -o %s %s; the sandbox binary and the %s beside it go together)", label, sberr.ErrInvalidConfig, got, want, p, pkg, earlystart.InitName)
	}
	if len(sandboxBinSeen) >= 8 {
		clear(sandboxBinSeen)
	}
	sandboxBinSeen[p] = id
	if cache != "" && os.MkdirAll(filepath.Dir(cache), 0o700) == nil {
		_ = records.Write(cache, &id) // best effort: the next process asks again
	}
	return &id, nil
}

// openChecked opens the binary c names for executing it, and makes sure it
// is still the file that was checked (its identity): one replaced since
// is refused, not run.
func openChecked(c checkedBinary) (*os.File, error) {
	f, err := os.Open(c.Path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok {
		mtime, ctime := statTimes(st)
		ok = uint64(st.Dev) == c.Dev && st.Ino == c.Ino && fi.Size() == c.Size && mtime == c.MtimeNs && ctime == c.CtimeNs
	}
	if !ok {
		f.Close()
		return nil, fmt.Errorf("%s: %w: replaced or changed since this Create checked it (try again once it is no longer being installed)", c.Path, sberr.ErrInvalidConfig)
	}
	return f, nil
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
