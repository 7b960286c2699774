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

// roleFingerprint: print the stamped protocolFingerprint and exit
// (checkBinary).
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

// checkedBinary is a binary (the sandbox binary, or the init beside it)
// that reported a fingerprint, pinned by
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
// remembers a binary that reported our fingerprint, by path and
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
// It is checked by its fingerprint like any other, and must be no less
// trusted than this program (openBeside): a stale or untrusted one fails
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

// besideSource names UseSandboxBinaryBeside's binary in messages.
const besideSource = "the " + SandboxBinaryName + " beside this program"

// sandboxBinary returns the binary a sandbox's processes run, once checked:
// explicit (Options.SandboxBinary), else the one SandboxBinaryEnv names,
// else UseSandboxBinaryBeside's, else this program. A check is remembered
// in this process and across processes (fingerprintCache).
func sandboxBinary(ctx context.Context, explicit string) (string, error) {
	p, source := explicit, "local.Options.SandboxBinary"
	if p == "" {
		p, source = os.Getenv(SandboxBinaryEnv), SandboxBinaryEnv
	}
	if p == "" {
		sandboxBinMu.Lock()
		p, source = besideBinary, besideSource
		sandboxBinMu.Unlock()
	}
	if p == "" {
		return os.Executable()
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s=%q: %w: give an absolute path", source, p, sberr.ErrInvalidConfig)
	}
	label := fmt.Sprintf("%s=%q", source, p)
	var f *os.File
	var st *syscall.Stat_t
	if source == besideSource {
		// Found, not named: no less trusted than this program, or a file
		// anyone dropped beside it would run as us.
		self, err := os.Executable()
		if err == nil {
			self, err = filepath.EvalSymlinks(self)
		}
		if err == nil {
			f, st, err = openBeside(self, p)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w: %w", label, sberr.ErrInvalidConfig, err)
		}
		defer f.Close()
	} else {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", source, err)
		}
		var ok bool
		st, ok = fi.Sys().(*syscall.Stat_t)
		if !ok || !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%s: %w: not a regular file", label, sberr.ErrInvalidConfig)
		}
	}
	if _, err := checkBinary(ctx, p, f, label, st, protocolFingerprint(), "./cmd/"+SandboxBinaryName); err != nil {
		return "", err
	}
	return p, nil
}

// initBinary returns cmd/code-sandboxes-init (earlystart.InitName), as
// checked, when it lies beside the sandbox binary exe (beside the file a
// link names) and speaks this build's protocol, for the sandbox's stage 1
// (isolate.Spec.Init); nil when there is none or exe is this program (a
// program re-executing itself has no init beside it). It runs with every
// capability in the sandbox's namespaces, so it must be as trusted as exe
// (openBeside); it is opened once, and checked and run from that open
// file. One there but stale or less trusted fails the Create with what to
// do, never runs.
func initBinary(ctx context.Context, exe string) (*checkedBinary, error) {
	if self, err := os.Executable(); err != nil || self == exe {
		return nil, nil
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	p := filepath.Join(filepath.Dir(exe), earlystart.InitName)
	label := fmt.Sprintf("the %s beside %s (%s)", earlystart.InitName, filepath.Base(exe), p)
	f, st, err := openBeside(exe, p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", label, sberr.ErrInvalidConfig, err)
	}
	defer f.Close()
	return checkBinary(ctx, p, f, label, st, earlystart.Fingerprint(), "./cmd/"+earlystart.InitName)
}

// openBeside opens the binary p, found beside anchor (a binary already
// trusted), to check and run it: only if it is no less trusted than anchor
// -- a regular file, not a link (one dropped in a shared directory could
// name any system binary, which the check would then run), owned by
// anchor's owner or root, and writable by nobody anchor isn't (a group's
// write only if anchor grants it to the same group, as a umask of 002
// makes for both; others' never). Not there: fs.ErrNotExist.
func openBeside(anchor, p string) (*os.File, *syscall.Stat_t, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, errors.New("a symbolic link: put the file itself there, or remove it")
	}
	if err != nil {
		return nil, nil, err
	}
	fail := func(e error) (*os.File, *syscall.Stat_t, error) {
		f.Close()
		return nil, nil, e
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return fail(errors.New("not a regular file: remove it"))
	}
	ai, err := os.Stat(anchor)
	if err != nil {
		return fail(err)
	}
	ast, ok := ai.Sys().(*syscall.Stat_t)
	if !ok {
		return fail(errors.New("no owner to compare with"))
	}
	mode, amode := fi.Mode().Perm(), ai.Mode().Perm()
	if (st.Uid != ast.Uid && st.Uid != 0) || mode&0o002 != 0 || (mode&0o020 != 0 && (amode&0o020 == 0 || st.Gid != ast.Gid)) {
		return fail(fmt.Errorf("owned by uid %d gid %d with mode %v beside %s (uid %d gid %d, mode %v): it runs every sandbox's setup, so it must be no less trusted than that (chown it to the same owner, chmod go-w; or remove it)", st.Uid, st.Gid, mode, anchor, ast.Uid, ast.Gid, amode))
	}
	return f, st, nil
}

// checkBinary checks that the binary p (label names it and how it was
// found; st its stat; f, when not nil, the open file to run rather than
// the path) reports the protocol shapes (and the build:
// earlystart.Compatible), rebuilt from pkg if not: asked once per file
// identity, remembered in this process and across processes
// (fingerprintCache). It returns what was checked, for openChecked.
func checkBinary(ctx context.Context, p string, f *os.File, label string, st *syscall.Stat_t, shapes, pkg string) (*checkedBinary, error) {
	want := earlystart.Stamp(shapes)
	id := identityOf(p, st)
	id.Fingerprint = want
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
	run := p
	if f != nil {
		// The open file, inherited as fd 3 (not close-on-exec: a script's
		// interpreter opens its path again).
		run = "/proc/self/fd/3"
	}
	cmd := exec.CommandContext(ctx, run)
	if f != nil {
		cmd.ExtraFiles = []*os.File{f}
	}
	cmd.Args = []string{"code-sandboxes-fingerprint"}
	cmd.Env = append(minimalHostEnv(), roleEnv+"="+roleFingerprint)
	var out bytes.Buffer
	cmd.Stdout = &limitedBuffer{buf: &out, left: 256}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: asking its protocol: %w (is it a build of %s?)", label, err, pkg)
	}
	if got := strings.TrimSpace(out.String()); !earlystart.Compatible(got, want) {
		return nil, fmt.Errorf("%s: %w: it speaks protocol %q, this program %q: rebuild it from the same source as this program (make build, or go build -o %s %s)", label, sberr.ErrInvalidConfig, got, want, p, pkg)
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

// identityOf is the identity of the file at p with stat st, which a
// check is pinned to (no fingerprint yet).
func identityOf(p string, st *syscall.Stat_t) checkedBinary {
	mtime, ctime := statTimes(st)
	return checkedBinary{Path: p, Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size, MtimeNs: mtime, CtimeNs: ctime}
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
		now := identityOf(c.Path, st)
		now.Fingerprint = c.Fingerprint
		ok = now == c
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
