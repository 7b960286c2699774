package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/earlystart"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// TestSandboxBinaryCheckRemembered: a sandbox binary's fingerprint check
// is remembered across processes (a new process is a cleared in-process
// map here), keyed by the file's identity: rewritten in place (even with
// its mtime put back) or replaced, it is asked again, and a stale one is
// refused whatever the cache says.
func TestSandboxBinaryCheckRemembered(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir := t.TempDir()
	bin := filepath.Join(dir, "code-sandboxes-sandbox")
	runs := filepath.Join(dir, "runs")
	script := func(fp string) []byte {
		return []byte("#!/bin/sh\necho run >> " + runs + "\necho " + fp + "\n")
	}
	if err := os.WriteFile(bin, script(earlystart.Stamp(protocolFingerprint())), 0o755); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		b, _ := os.ReadFile(runs)
		return strings.Count(string(b), "run")
	}
	ctx := context.Background()
	newProcess := func() {
		sandboxBinMu.Lock()
		clear(sandboxBinSeen)
		sandboxBinMu.Unlock()
	}
	check := func(wantRuns int, wantOK bool) {
		t.Helper()
		newProcess()
		_, err := sandboxBinary(ctx, bin)
		if (err == nil) != wantOK {
			t.Fatalf("sandboxBinary: %v, want ok=%v", err, wantOK)
		}
		if got := count(); got != wantRuns {
			t.Fatalf("the binary ran %d times, want %d", got, wantRuns)
		}
	}
	check(1, true)
	check(1, true) // remembered
	check(1, true)

	// Rewritten in place, its mtime put back: the ctime tells.
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a ctime the old one can't equal
	if err := os.WriteFile(bin, script("stale"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(bin, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	check(2, false)
	check(3, false) // a refusal is not remembered

	// Replaced by another file (rename: another inode).
	tmp := bin + ".new"
	if err := os.WriteFile(tmp, script(earlystart.Stamp(protocolFingerprint())), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	check(4, true)
	check(4, true)

	// An entry another build wrote (another fingerprint) is not ours.
	cache := fingerprintCache(bin)
	b, err := os.ReadFile(cache)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cache, []byte(strings.Replace(string(b), protocolFingerprint(), "0123456789abcdef01234567", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	check(5, true)
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("cache file: %v %v (want private to us)", fi.Mode(), err)
	}
}

// TestOpenCheckedRefusesAReplacedBinary: the supervisor executes the init
// binary the caller checked only if the file it opens is still that one: a
// binary replaced (another inode) or rewritten (its ctime) between the
// check and the open is refused with ErrInvalidConfig, not run.
func TestOpenCheckedRefusesAReplacedBinary(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "code-sandboxes-init")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	checked := func() checkedBinary {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return identityOf(p, fi.Sys().(*syscall.Stat_t))
	}
	c := checked()
	f, err := openChecked(c)
	if err != nil {
		t.Fatalf("the checked file: %v", err)
	}
	f.Close()

	time.Sleep(10 * time.Millisecond) // a ctime the old one can't equal
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if f, err := openChecked(c); err == nil {
		f.Close()
		t.Error("a binary rewritten since its check: opened")
	} else if !errors.Is(err, sberr.ErrInvalidConfig) {
		t.Errorf("a binary rewritten since its check: %v, want ErrInvalidConfig", err)
	}
	c = checked()
	if err := os.Rename(p, p+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if f, err := openChecked(c); err == nil {
		f.Close()
		t.Error("a binary replaced since its check: opened")
	}
}

// TestOpenBesideTrustsNoLessThanItsAnchor: a binary found beside another
// (the sandbox binary beside the program, the init beside the sandbox
// binary) is opened only if it is no less trusted: a link, one others may
// write, one its group may write when the anchor's may not, or (as root)
// another user's is refused; the same owner and modes are fine, and so is a
// group's write the anchor grants too.
func TestOpenBesideTrustsNoLessThanItsAnchor(t *testing.T) {
	dir := t.TempDir()
	anchor := filepath.Join(dir, "anchor")
	p := filepath.Join(dir, "beside")
	write := func(path string, mode os.FileMode) {
		t.Helper()
		os.Remove(path)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	try := func(what string, wantOK bool) {
		t.Helper()
		f, _, err := openBeside(anchor, p)
		if f != nil {
			f.Close()
		}
		if (err == nil) != wantOK {
			t.Errorf("%s: %v, want ok=%v", what, err, wantOK)
		}
	}
	write(anchor, 0o755)
	write(p, 0o755)
	try("the same owner and mode", true)
	write(p, 0o775)
	try("group-writable beside a binary that is not", false)
	write(anchor, 0o775)
	try("group-writable beside a group-writable binary of the same group", true)
	write(p, 0o757)
	try("writable by others", false)
	os.Remove(p)
	if err := os.Symlink(anchor, p); err != nil {
		t.Fatal(err)
	}
	try("a link (to the anchor itself)", false)
	if _, _, err := openBeside(anchor, filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want ErrNotExist", err)
	}
	if os.Geteuid() == 0 {
		write(anchor, 0o755)
		write(p, 0o755)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		try("another user's", false)
		if err := os.Chown(p, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(anchor, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		try("root's beside another user's binary", true)
	}
}
