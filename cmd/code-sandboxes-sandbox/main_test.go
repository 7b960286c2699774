package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// TestLeanInits: every process of a local sandbox runs this binary's
// package inits before anything else, three of them on the way to a cold
// start's first result, so what it links must stay lean. It doesn't link
// the environment store or the image libraries (the caller side's: they
// cost ~0.5 ms of CPU per process), and its inits allocate at most
// initBudget (they allocated 945 KB with the store and the package-level
// regexps and kernel hash, 385 KB without).
func TestLeanInits(t *testing.T) {
	_, err := exec.LookPath("go")
	testdep.Require(t, err == nil, "the go command")
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, heavy := range []string{
		"github.com/code-sandboxes/code-sandboxes/internal/environment",
		"github.com/google/go-containerregistry/",
		"go.yaml.in/yaml/",
		"github.com/klauspost/compress/",
		"github.com/schollz/progressbar/",
		"k8s.io/",
	} {
		for _, p := range strings.Fields(string(out)) {
			if strings.HasPrefix(p, heavy) {
				t.Errorf("the sandbox binary links %s (keep it out of internal/local: see local.EnvironmentStore)", p)
				break
			}
		}
	}

	bin := filepath.Join(t.TempDir(), "code-sandboxes-sandbox")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	trace, _ := cmd.CombinedOutput() // exits 2: no role
	const initBudget = 512 << 10
	total, n := 0, 0
	var top string
	topBytes := 0
	for line := range strings.Lines(string(trace)) {
		// init <pkg> @<t> ms, <t> ms clock, <n> bytes, <n> allocs
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "init" {
			continue
		}
		b, err := strconv.Atoi(f[7])
		if err != nil {
			t.Fatalf("inittrace line %q", line)
		}
		total += b
		n++
		if b > topBytes {
			top, topBytes = f[1], b
		}
	}
	if n == 0 {
		t.Fatalf("no inittrace output: %s", trace)
	}
	t.Logf("%d package inits, %d bytes allocated (the most: %s, %d bytes)", n, total, top, topBytes)
	if total > initBudget {
		t.Errorf("the package inits allocate %d bytes, over the %d budget (the most: %s, %d bytes): make package-level work lazy (sync.OnceValue) or keep the package out of the sandbox binary", total, initBudget, top, topBytes)
	}
}
