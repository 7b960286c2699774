package records

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	r := UIDRange{Base: 5000, Size: 8}
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
