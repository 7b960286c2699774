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
		st := fi.Sys().(*syscall.Stat_t)
		mtime, ctime := statTimes(st)
		return checkedBinary{Path: p, Dev: uint64(st.Dev), Ino: st.Ino, Size: fi.Size(), MtimeNs: mtime, CtimeNs: ctime}
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
