package environment

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestShareWithBase: a build made from another shares the files it did not
// change and nothing else; what base holds (symlinks out of it, links in
// its directories) never brings an outside file into the build.
func TestShareWithBase(t *testing.T) {
	testdep.Require(t, os.Geteuid() == 0, "root (linking another file's inode with AT_EMPTY_PATH needs it, as builds do)")
	dir := t.TempDir()
	base, rootfs, outside := filepath.Join(dir, "base"), filepath.Join(dir, "rootfs"), filepath.Join(dir, "outside")
	for _, d := range []string{base + "/usr/lib", base + "/etc", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, 3<<20+5) // several compare chunks, a short last one
	for i := range big {
		big[i] = byte(i * 7)
	}
	write(base+"/usr/lib/same", string(big))
	write(base+"/usr/lib/edited", "one")
	write(base+"/usr/lib/chmodded", "two")
	write(base+"/usr/lib/xattr", "three")
	write(base+"/etc/conf", "four")
	write(outside+"/secret", "five")
	write(base+"/usr/lib/moved-a", "aaaa")
	write(base+"/usr/lib/moved-b", "bbbb")
	if out, err := exec.Command("cp", "-a", base, rootfs).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	// What a template's steps might do after the copy.
	write(rootfs+"/usr/lib/edited", "ONE")
	if err := os.Chtimes(rootfs+"/usr/lib/edited", time.Time{}, mtime(t, base+"/usr/lib/edited")); err != nil {
		t.Fatal(err) // same size and times as base's: only the content differs
	}
	if err := os.Chmod(rootfs+"/usr/lib/chmodded", 0o600); err != nil {
		t.Fatal(err)
	}
	want := int64(len(big))
	if err := unix.Lsetxattr(rootfs+"/usr/lib/xattr", "user.cs-test", []byte("x"), 0); err == unix.ENOTSUP {
		want += int64(len("three")) // no user xattrs here: nothing tells them apart
	} else if err != nil {
		t.Fatal(err)
	}
	// Swap two same-sized files: each keeps its times, neither is base's at
	// its new path.
	if err := os.Rename(rootfs+"/usr/lib/moved-a", rootfs+"/usr/lib/tmp"); err != nil {
		t.Fatal(err)
	}
	os.Rename(rootfs+"/usr/lib/moved-b", rootfs+"/usr/lib/moved-a")
	os.Rename(rootfs+"/usr/lib/tmp", rootfs+"/usr/lib/moved-b")
	// A hostile base: /etc a symlink out of it, where a file of the same
	// metadata and content as the build's waits.
	write(rootfs+"/etc/secret", "five")
	os.Chtimes(rootfs+"/etc/secret", time.Time{}, mtime(t, outside+"/secret"))
	if err := os.RemoveAll(base + "/etc"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, base+"/etc"); err != nil {
		t.Fatal(err)
	}

	saved, err := shareWithBase(base, rootfs)
	if err != nil {
		t.Fatal(err)
	}
	if saved != want {
		t.Errorf("saved %d bytes, want %d (only usr/lib/same)", saved, want)
	}
	if inode(t, rootfs+"/usr/lib/same") != inode(t, base+"/usr/lib/same") {
		t.Error("an unchanged file was not shared")
	}
	for _, rel := range []string{"usr/lib/edited", "usr/lib/chmodded", "usr/lib/moved-a", "usr/lib/moved-b"} {
		if inode(t, rootfs+"/"+rel) == inode(t, base+"/"+rel) {
			t.Errorf("%s was changed by the build but is now base's", rel)
		}
	}
	if got, _ := os.ReadFile(rootfs + "/usr/lib/moved-a"); string(got) != "bbbb" {
		t.Errorf("moved-a = %q, want the build's bbbb", got)
	}
	if inode(t, rootfs+"/etc/secret") == inode(t, outside+"/secret") {
		t.Error("a file outside base (behind its symlink) was linked into the build")
	}
	if b, err := os.ReadFile(rootfs + "/usr/lib/same"); err != nil || len(b) != len(big) {
		t.Errorf("shared file: %d bytes, %v", len(b), err)
	}
	// Nothing left from the rename dance.
	ents, _ := os.ReadDir(rootfs + "/usr/lib")
	for _, e := range ents {
		if len(e.Name()) > 9 && e.Name()[:10] == ".cs-share-" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func mtime(t *testing.T, p string) time.Time {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}
