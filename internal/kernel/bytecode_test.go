package kernel

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// TestInstalledBytecodeIsUsed: a kernel started in a script directory that
// InstallBytecode filled imports that .pyc: Python neither rejects it nor
// compiles the source (it would rewrite the .pyc with a timestamp-based
// one), and the kernel works.
func TestInstalledBytecodeIsUsed(t *testing.T) {
	_, err := os.Stat(testPython)
	testdep.Require(t, err == nil, testPython+" (make deps)")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tag, pyc, err := CompileBytecode(ctx, testPython)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := InstallBytecode(dir, tag, pyc); err != nil {
		t.Fatal(err)
	}
	s := newTestSession(t, func(o *Options) { o.ScriptDir = dir })
	r := exec1(t, s, "import sys; [m.__cached__ for m in list(sys.modules.values()) if m.__name__.startswith('csbx_kernel_')]")
	if m := r.main(); m == nil {
		t.Fatalf("no result: %+v", r.events)
	}
	cached := filepath.Join(dir, "__pycache__", kernelModule()+"."+tag+".pyc")
	got, err := os.ReadFile(cached)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pyc) {
		t.Fatalf("%s was rewritten: the kernel compiled its source instead of importing the installed bytecode", cached)
	}
	// flags (bytes 4-8) 1: hash-based, source unchecked (PEP 552).
	if len(pyc) < 8 || pyc[4] != 1 {
		t.Fatalf("not an unchecked hash-based pyc: % x", pyc[:min(8, len(pyc))])
	}
}

// TestInstallBytecodeRefusesBadTags: the tag becomes part of a file name.
func TestInstallBytecodeRefusesBadTags(t *testing.T) {
	dir := t.TempDir()
	for _, tag := range []string{"", "../x", "a/b", "x y", "CPython-311", "x\n", string(make([]byte, 65)), strings.Repeat("a", 65)} {
		if err := InstallBytecode(dir, tag, []byte("x")); err == nil {
			t.Errorf("tag %q accepted", tag)
		}
	}
	if err := InstallBytecode(dir, strings.Repeat("a", 64), []byte("x")); err != nil {
		t.Errorf("a 64-character tag refused: %v", err)
	}
	if err := InstallBytecode(dir, "cpython-311", make([]byte, maxBytecode+1)); err == nil {
		t.Error("oversized bytecode accepted")
	}
}
