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
