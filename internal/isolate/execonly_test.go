//go:build linux

package isolate

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestExecOnlyCopy(t *testing.T) {
	base := t.TempDir()
	srcPath := filepath.Join(base, "bin")
	if err := os.WriteFile(srcPath, []byte("#!/bin/sh\necho one\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "exec")
	copyOf := func() (*os.File, unix.Stat_t) {
		t.Helper()
		src, err := os.Open(srcPath)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		f, err := execOnlyCopy(dir, src)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o7777 != execOnlyMode || int(st.Uid) != os.Geteuid() || st.Size != 19 {
			t.Fatalf("copy: mode %o uid %d size %d", st.Mode&0o7777, st.Uid, st.Size)
		}
		// O_PATH: no reading through it.
		if _, err := unix.Read(int(f.Fd()), make([]byte, 1)); err == nil {
			t.Fatal("the copy's descriptor reads")
		}
		return f, st
	}
	_, a := copyOf()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory: %v %v", fi.Mode(), err)
	}
	_, b := copyOf()
	if a.Ino != b.Ino {
		t.Fatal("a second start made a second copy of the same binary")
	}
	// A new version of the binary gets a copy of its own.
	later := time.Now().Add(time.Minute)
	if err := os.WriteFile(srcPath, []byte("#!/bin/sh\necho two\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(srcPath, later, later); err != nil {
		t.Fatal(err)
	}
	_, c := copyOf()
	if c.Ino == a.Ino {
		t.Fatal("a new version of the binary ran the old copy")
	}
	// Anything else at a copy's name (made by hand, say) is replaced, not run.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, d := copyOf()
	if d.Ino == c.Ino {
		t.Fatal("a file that isn't execute-only was used as the copy")
	}
	// Starts racing to make the copy of a new version all end up with the
	// one that stays at its name (the root user's sudo is bound from it
	// by path).
	later = later.Add(time.Minute)
	if err := os.Chtimes(srcPath, later, later); err != nil {
		t.Fatal(err)
	}
	inos := make(chan uint64, 4)
	for range 4 {
		go func() {
			src, err := os.Open(srcPath)
			if err != nil {
				inos <- 0
				return
			}
			defer src.Close()
			f, err := execOnlyCopy(dir, src)
			if err != nil {
				inos <- 0
				return
			}
			defer f.Close()
			var st, at unix.Stat_t
			if unix.Fstat(int(f.Fd()), &st) != nil || unix.Stat(f.Name(), &at) != nil || at.Ino != st.Ino {
				inos <- 0
				return
			}
			inos <- st.Ino
		}()
	}
	first := <-inos
	for range 3 {
		if ino := <-inos; ino == 0 || ino != first {
			t.Fatalf("concurrent starts got copies %d and %d (0: not the one at its name)", first, ino)
		}
	}
	// A directory others can write to is refused.
	loose := filepath.Join(base, "loose")
	if err := os.Mkdir(loose, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o777); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if f, err := execOnlyCopy(loose, src); err == nil {
		f.Close()
		t.Fatal("a copy made in a directory anyone can write to")
	}
}
