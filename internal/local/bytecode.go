package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/kernel"
)

// The kernel's bytecode for sandboxes on the host's system directories
// (kernel/bytecode.go says why): compiled once per interpreter and kernel
// version by the host's own python3, the same file the sandbox runs (its
// /usr and /bin are the host's), kept in the caller's cache directory, read
// by the supervisor and handed to the agent with its config.

// sandboxPath is the agent's PATH for finding python3 (sandboxenv.Env).
var sandboxPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

var compiling sync.Map // cache file → struct{}: a compile under way or done

// kernelBytecodePath returns the file holding the kernel's bytecode for
// python (Options.Python, "" = python3) on the host's directories, or ""
// when there is none yet: then a compile starts in the background, for the
// next sandboxes.
func kernelBytecodePath(python string) string {
	if python == "" {
		python = "python3"
	}
	if !strings.Contains(python, "/") {
		found := ""
		for _, d := range sandboxPath {
			if st, err := os.Stat(filepath.Join(d, python)); err == nil && st.Mode().IsRegular() {
				found = filepath.Join(d, python)
				break
			}
		}
		if found == "" {
			return ""
		}
		python = found
	}
	st, err := os.Stat(python)
	if err != nil {
		return ""
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	// Keyed by the interpreter (path, size, mtime: an upgrade makes a new
	// one) and the kernel's version.
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%d", kernel.Version(), python, st.Size(), st.ModTime().UnixNano()))
	path := filepath.Join(cache, "code-sandboxes", "kernel-bytecode", hex.EncodeToString(sum[:12]))
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if _, busy := compiling.LoadOrStore(path, struct{}{}); !busy {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := compileKernel(ctx, python, path); err != nil {
				compiling.Delete(path) // try again with a later sandbox
			}
		}()
	}
	return ""
}

func compileKernel(ctx context.Context, python, path string) error {
	tag, pyc, err := kernel.CompileBytecode(ctx, python)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append([]byte(tag+"\n"), pyc...))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
