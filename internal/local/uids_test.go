package local

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/records"
)

// TestAllocHostUIDSeesOthersAndFrees: the per-process cache of allocated
// uids still sees a uid another process allocated after it was filled, and
// a uid is free again once its sandbox's directory is gone.
func TestAllocHostUIDSeesOthersAndFrees(t *testing.T) {
	// A registry of its own: the host's holds the claims of whatever
	// sandboxes run beside this test.
	t.Setenv(records.HostUIDRegistryEnv, filepath.Join(t.TempDir(), "reg")) // made 0700: the registry must be ours alone
	rt := t.TempDir()
	alloc := func(name string) int {
		t.Helper()
		d := filepath.Join(rt, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		uid, err := allocHostUID(rt, d)
		if err != nil {
			t.Fatal(err)
		}
		return uid
	}
	if u := alloc("a"); u != uidBase {
		t.Fatalf("first uid %d", u)
	}
	// Another process's sandbox, made after our cache knew the directory.
	if err := os.Mkdir(filepath.Join(rt, "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rt, "b", uidFile), []byte(strconv.Itoa(uidBase+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if u := alloc("c"); u != uidBase+2 {
		t.Fatalf("got %d, want %d: another process's uid handed out again", u, uidBase+2)
	}
	if err := os.RemoveAll(filepath.Join(rt, "a")); err != nil {
		t.Fatal(err)
	}
	if u := alloc("d"); u != uidBase {
		t.Fatalf("got %d, want the freed %d", u, uidBase)
	}
}
