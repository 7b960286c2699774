package sandboxes_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// TestLocalKernelBytecodeInstalled: the kernel's bytecode, compiled once on
// the host and passed to the agent as the cache file's descriptor, is what
// the sandbox's kernel directory holds, and the agent keeps no descriptor
// of the host file once it is up.
func TestLocalKernelBytecodeInstalled(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skip("no cache directory")
	}
	cacheDir := filepath.Join(cache, "code-sandboxes", "kernel-bytecode")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt := ownRuntimeDir(t, "cs-pool-")
	cfg := sandboxes.Config{Variant: "local", Options: local.Options{RuntimeDir: rt}}
	const code = `import glob, hashlib, os
fs = glob.glob(os.path.expanduser("~/.cache/code-sandboxes/kernel/__pycache__/*.pyc"))
" ".join(hashlib.sha256(open(f, "rb").read()).hexdigest() for f in fs)`
	// The first Create may find no cache yet (it is compiled in the
	// background); a later one must use it.
	for try := 0; ; try++ {
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ex, err := sb.RunCode(ctx, code)
		if err != nil {
			sb.Close()
			t.Fatal(err)
		}
		inSandbox := strings.Fields(strings.Trim(ex.Text(), "'"))
		host := map[string]bool{}
		ents, _ := os.ReadDir(cacheDir)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(cacheDir, e.Name()))
			if err != nil || e.IsDir() {
				continue
			}
			if _, pyc, ok := bytes.Cut(b, []byte("\n")); ok {
				sum := sha256.Sum256(pyc)
				host[hex.EncodeToString(sum[:])] = true
			}
		}
		found := false
		for _, h := range inSandbox {
			found = found || host[h]
		}
		if found {
			recs := poolRecords(t, rt)
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			fds, _ := os.ReadDir("/proc/" + strconv.Itoa(recs[0].AgentPid) + "/fd")
			for _, fd := range fds {
				if l, _ := os.Readlink("/proc/" + strconv.Itoa(recs[0].AgentPid) + "/fd/" + fd.Name()); strings.HasPrefix(l, cacheDir) {
					t.Errorf("the agent holds fd %s of %s", fd.Name(), l)
				}
			}
			sb.Close()
			return
		}
		sb.Close()
		if try == 20 {
			t.Fatalf("the sandbox's kernel bytecode %q is none of the host's cache (%d files in %s)", inSandbox, len(host), cacheDir)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
