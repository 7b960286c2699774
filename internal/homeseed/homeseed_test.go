package homeseed

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// seedTree is an environment's home as a hostile build could leave it.
func seedTree(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "home", "user")
	if err := os.MkdirAll(filepath.Join(src, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"top.txt": "top\n", "a/b/deep.txt": "deep\n", "suid": "#!/bin/sh\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "suid"), 0o755|os.ModeSetuid|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(src, "shadow")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return src
}

func TestFromDirCopiesWhatAHomeHolds(t *testing.T) {
	src, dst := seedTree(t), t.TempDir()
	if err := FromDir(src, dst, Limits{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"top.txt": "top\n", "a/b/deep.txt": "deep\n"} {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	if st, err := os.Stat(filepath.Join(dst, "suid")); err != nil || st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || st.Mode().Perm() != 0o755 {
		t.Errorf("suid: %v, %v; want 0755 without set-id bits", st.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "shadow")); err != nil || target != "/etc/shadow" {
		t.Errorf("the symlink: %q, %v; want it kept as a symlink, not followed", target, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); !os.IsNotExist(err) {
		t.Errorf("the fifo was copied (%v)", err)
	}
}

func TestFromDirMissingSeedsNothing(t *testing.T) {
	dst := t.TempDir()
	if err := FromDir(filepath.Join(t.TempDir(), "none"), dst, Limits{}); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Errorf("seeded %v from nothing", ents)
	}
}

// A seed that is itself a symlink (to the host's /etc, say) is refused,
// not followed.
func TestSeedSymlinkRefused(t *testing.T) {
	link := filepath.Join(t.TempDir(), "seed")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	if err := FromDir(link, t.TempDir(), Limits{}); err == nil {
		t.Error("a symlinked seed was copied")
	}
	if err := Check(link, Limits{Bytes: 1 << 30}); err == nil {
		t.Error("a symlinked seed was measured")
	}
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "home"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(root, "home", "user")); err != nil {
		t.Fatal(err)
	}
	if p, err := RootfsHome(root); err == nil || p != "" {
		t.Errorf("RootfsHome with home/user a symlink to /etc: %q, %v; want refused", p, err)
	}
	if p, err := RootfsHome(t.TempDir()); err != nil || p != "" {
		t.Errorf("RootfsHome without a home: %q, %v", p, err)
	}
}

// The bounds hold for bytes and for entries, in Check as in the copy, and
// say what to change.
func TestBounds(t *testing.T) {
	src := seedTree(t)
	for _, lim := range []Limits{{Bytes: 8 << 10, Hint: "a bigger home"}, {Bytes: 1 << 30, Inodes: 3, Hint: "a bigger home"}} {
		for name, err := range map[string]error{"Check": Check(src, lim), "FromDir": FromDir(src, t.TempDir(), lim)} {
			if err == nil || !strings.Contains(err.Error(), TooBig) || !strings.Contains(err.Error(), "a bigger home") {
				t.Errorf("%s within %+v: %v; want %q and the hint", name, lim, err, TooBig)
			}
		}
	}
	if err := Check(src, Limits{Bytes: 1 << 30, Inodes: 100}); err != nil {
		t.Errorf("Check within ample bounds: %v", err)
	}
}
