package kernel

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// jstrCheck imports the kernel as a module (fds 3 and 4 stand in for its
// pipes) and compares its own frame-string encoder with _json's on edge
// cases and random strings; it also says whether the import loaded _json.
const jstrCheck = `
import sys, random
sys.path.insert(0, sys.argv[1])
import kmod as k
print("json loaded at import:", "_json" in sys.modules)
from _json import encode_basestring_ascii as c
cases = ["", "plain", 'a"b', "a\\b", "\x7f", "tab\there", "nl\n", "\x00\x1f", "\u00e9", "\ud800", "\U0001f600",
         "x" * 5000, "\n" * 5000, "\n" * 4096, "\n" * 4097, "é" * 10, "a\u2028b"]
cases += [chr(i) for i in range(0, 0x300)]
rnd = random.Random(7)
alphabet = [chr(i) for i in range(0, 128)] + ["\u00e9", "\ud83d", "\U0001f600", "\u2028"]
for n in range(3000):
    size = rnd.choice([0, 1, 5, 50, 500, 4095, 4096, 4097, 6000])
    ascii_only = n % 2 == 0
    pool = alphabet[:128] if ascii_only else alphabet
    cases.append("".join(rnd.choice(pool) for _ in range(size)))
bad = [s for s in cases if k._jstr_py(s) != c(s)]
print("checked", len(cases), "mismatches", len(bad))
for s in bad[:5]:
    print("mismatch", repr(s[:40]), k._jstr_py(s)[:60], c(s)[:60])
`

// The kernel's frames encode strings as _json does, without loading _json
// before its first command is answered (a cold start's first result would
// wait for the extension's load).
func TestFrameStringsMatchJSON(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kmod.py"), []byte(kernelSource()), 0o644); err != nil {
		t.Fatal(err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	// -S: nothing of site's (a .pth file may import json) muddies the check.
	cmd := exec.Command(testPython, "-S", "-c", jstrCheck, dir)
	cmd.ExtraFiles = []*os.File{devnull, devnull}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := string(out)
	if !strings.Contains(got, "json loaded at import: False") {
		t.Errorf("importing the kernel loads _json:\n%s", got)
	}
	if !strings.Contains(got, "mismatches 0") {
		t.Errorf("the kernel's frame strings differ from _json's:\n%s", got)
	}
	t.Logf("%s", got)
}
