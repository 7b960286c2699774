package records

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestRoundTripAndBounds(t *testing.T) {
	dir := t.TempDir()
	if err := EnsureDir(filepath.Join(dir, "rt"), "X_DIR"); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "rt", "state.json")
	if err := Write(p, map[string]string{"token": "s3cret"}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("record mode: %v %v", st.Mode(), err)
	}
	var got map[string]string
	if err := Read(p, &got); err != nil || got["token"] != "s3cret" {
		t.Fatalf("read back: %v %v", got, err)
	}
	// A file where the directory should be is refused, naming the way out.
	f := filepath.Join(dir, "file")
	_ = os.WriteFile(f, nil, 0o600)
	if err := EnsureDir(f, "X_DIR"); err == nil {
		t.Fatal("a file accepted as the runtime directory")
	}
	// A record of more than 1 MiB is not read whole.
	big := filepath.Join(dir, "big.json")
	_ = os.WriteFile(big, []byte(`{"a":"`+strings.Repeat("x", 2<<20)+`"}`), 0o600)
	if err := Read(big, &got); err == nil {
		t.Fatal("an oversized record was read")
	}
	if d := RuntimeDir("/given", "X_DIR", "n"); d != "/given" {
		t.Fatalf("configured: %s", d)
	}
	t.Setenv("X_DIR", "/from-env")
	if d := RuntimeDir("", "X_DIR", "n"); d != "/from-env" {
		t.Fatalf("env: %s", d)
	}
}

// TestAllocHostUIDAcrossRuntimeDirs: two runtime directories never hand
// out the same uid while its sandbox's directory lives (each saw only its
// own, and both gave out the first); once that directory is gone, its uid
// is free for the other; for root, a registry that can't be made fails
// the allocation with what to do, instead of allocating blind.
func TestAllocHostUIDAcrossRuntimeDirs(t *testing.T) {
	t.Setenv(HostUIDRegistryEnv, filepath.Join(t.TempDir(), "reg"))
	r := UIDRange{Base: 4992, Size: 16}
	if os.Geteuid() == 0 {
		r.Base = 5000 // root allocates from the range's lower half
	}
	rt1, rt2 := t.TempDir(), t.TempDir()
	alloc := func(rt, name string) int {
		t.Helper()
		d := filepath.Join(rt, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		uid, err := AllocHostUID(rt, d, r)
		if err != nil {
			t.Fatal(err)
		}
		return uid
	}
	if u := alloc(rt1, "a"); u != 5000 {
		t.Fatalf("first uid %d, want 5000", u)
	}
	if u := alloc(rt2, "b"); u != 5001 {
		t.Fatalf("the second runtime directory got %d, want 5001 (5000 is rt1's)", u)
	}
	if err := os.RemoveAll(filepath.Join(rt1, "a")); err != nil {
		t.Fatal(err)
	}
	if u := alloc(rt2, "c"); u != 5000 {
		t.Fatalf("got %d, want 5000, freed when its sandbox's directory went", u)
	}
	if u := alloc(rt1, "d"); u != 5002 {
		t.Fatalf("got %d, want 5002", u)
	}

	// The registry's place is a file: no allocation.
	bad := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(bad, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(HostUIDRegistryEnv, bad)
	d := filepath.Join(rt1, "e")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := AllocHostUID(rt1, d, r)
	if os.Geteuid() != 0 {
		// Not root: the runtime directory alone, as before the registry.
		if err != nil {
			t.Fatalf("not root, with no registry: %v", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), HostUIDRegistryEnv) {
		t.Fatalf("with no registry: %v, want an error naming %s", err, HostUIDRegistryEnv)
	}
	if _, ok := ReadHostUID(d, r); ok {
		t.Error("a uid was recorded without a claim")
	}
}

// TestHostUIDRegistryOutsideRuntimeDirs: the registry is no runtime
// directory's entry (root's local one is /run/code-sandboxes: a sweep took
// the registry for a dead sandbox's directory and removed it).
func TestHostUIDRegistryOutsideRuntimeDirs(t *testing.T) {
	for _, name := range []string{"code-sandboxes", "code-sandboxes-docker"} {
		rt := filepath.Join("/run", name) // root's, as RuntimeDir makes it
		if rel, err := filepath.Rel(rt, DefaultHostUIDRegistry); err == nil && !strings.HasPrefix(rel, "..") {
			t.Errorf("the host uid registry %s is inside root's runtime directory %s", DefaultHostUIDRegistry, rt)
		}
	}
}

// A claim's directory may be gone and its path made again by anyone (a
// runtime directory under /tmp): what is found there in place of the
// record -- a FIFO, a link to an endless file, another user's file -- is a
// stale claim, taken over at once, never a read that blocks or has no end.
func TestHostUIDStaleClaimsCantStall(t *testing.T) {
	reg := filepath.Join(t.TempDir(), "reg")
	t.Setenv(HostUIDRegistryEnv, reg)
	r := UIDRange{Base: 7000, Size: 16}
	lo := r.forCaller(os.Geteuid()).Base
	mkdir700(t, reg)
	gone := t.TempDir()
	plant := func(uid int, name string, make func(record string) error) {
		t.Helper()
		d := filepath.Join(gone, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := make(filepath.Join(d, uidFile)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(d, filepath.Join(reg, strconv.Itoa(uid))); err != nil {
			t.Fatal(err)
		}
	}
	plant(lo, "fifo", func(p string) error { return unix.Mkfifo(p, 0o644) })
	plant(lo+1, "zero", func(p string) error { return os.Symlink("/dev/zero", p) })
	if os.Geteuid() == 0 {
		plant(lo+2, "foreign", func(p string) error {
			if err := os.WriteFile(p, []byte(strconv.Itoa(lo+2)), 0o644); err != nil {
				return err
			}
			return os.Chown(p, 65534, 65534)
		})
	}
	rt := t.TempDir()
	for i := range 3 {
		if i == 2 && os.Geteuid() != 0 {
			break
		}
		d := filepath.Join(rt, strconv.Itoa(i))
		mkdir700(t, d)
		type result struct {
			uid int
			err error
		}
		done := make(chan result, 1)
		go func() {
			uid, err := AllocHostUID(rt, d, r)
			done <- result{uid, err}
		}()
		select {
		case res := <-done:
			if res.err != nil || res.uid != lo+i {
				t.Fatalf("allocation %d: %d, %v; want %d (its claim is stale)", i, res.uid, res.err, lo+i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("allocation %d still waits after 10 s: a planted record stalled it", i)
		}
	}
}

// The registry must be the caller's alone: one others may write in lets
// them remove live claims (two sandboxes would share a uid), one they may
// open lets them hold its lock. Root refuses it and says what to do; a
// caller that is not root never uses it (its own runtime directory and the
// upper half of the range, as with no registry).
func TestHostUIDRegistryMustBeOwn(t *testing.T) {
	r := UIDRange{Base: 9000, Size: 16}
	cases := map[string]func(reg string) error{
		"mode 0777": func(reg string) error { return os.Chmod(reg, 0o777) },
		"mode 0755": func(reg string) error { return os.Chmod(reg, 0o755) },
	}
	if os.Geteuid() == 0 {
		cases["another user's"] = func(reg string) error { return os.Chown(reg, 65534, 65534) }
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			reg := filepath.Join(t.TempDir(), "reg")
			mkdir700(t, reg)
			if err := spoil(reg); err != nil {
				t.Fatal(err)
			}
			t.Setenv(HostUIDRegistryEnv, reg)
			rt := t.TempDir()
			d := filepath.Join(rt, "s")
			mkdir700(t, d)
			uid, err := AllocHostUID(rt, d, r)
			if os.Geteuid() == 0 {
				if err == nil || !strings.Contains(err.Error(), "chmod 700") {
					t.Fatalf("root used a registry that is %s: uid %d, %v", name, uid, err)
				}
				return
			}
			if err != nil || uid != r.forCaller(os.Geteuid()).Base {
				t.Fatalf("not root: %d, %v", uid, err)
			}
			if ents, _ := os.ReadDir(reg); len(ents) != 0 {
				t.Fatalf("a claim was made in a registry that is %s", name)
			}
		})
	}
	// Through a symlink: refused too (root), whatever it points at.
	if os.Geteuid() == 0 {
		good := filepath.Join(t.TempDir(), "good")
		mkdir700(t, good)
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(good, link); err != nil {
			t.Fatal(err)
		}
		t.Setenv(HostUIDRegistryEnv, link)
		rt := t.TempDir()
		d := filepath.Join(rt, "s")
		mkdir700(t, d)
		if uid, err := AllocHostUID(rt, d, r); err == nil {
			t.Fatalf("root used a registry reached through a symlink: uid %d", uid)
		}
	}
}

// Root's sandboxes and those of callers that are not root come from two
// halves of a range, so the two never share a uid (only root can use the
// host-wide registry).
func TestHostUIDHalvesByCaller(t *testing.T) {
	r := DockerUIDs
	root, other := r.forCaller(0), r.forCaller(1000)
	if root.Base != r.Base || other.Base != root.Base+root.Size || other.Base+other.Size != r.Base+r.Size {
		t.Fatalf("halves %+v and %+v of %+v", root, other, r)
	}
}

// mkdir700 makes directory p (mode 0700) or fails the test.
func mkdir700(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
}
