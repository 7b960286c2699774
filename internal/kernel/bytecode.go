package kernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A kernel's first start compiles its source (py/, about 2,900 lines: several
// milliseconds of CPU, a large share of a sandbox's cold start) unless a
// .pyc is already in its script directory, which a fresh sandbox's home
// never has. So the host compiles it once, with the same interpreter the
// sandbox will run, and the sandbox's agent writes it next to the source
// before the first kernel starts (InstallBytecode).
//
// The .pyc is "unchecked hash-based" (PEP 552): Python loads it without
// comparing it with the source's mtime. It is made from kernelParts, which
// is keyed into the module's name, so it can't be stale; an interpreter
// whose magic number differs rejects it and compiles the source as before.

// compileScript reads the kernel's source on stdin and writes the cache tag
// (cpython-311), a newline and the .pyc.
const compileScript = `import sys, importlib.util, importlib._bootstrap_external as e
src = sys.stdin.buffer.read()
code = compile(src, "kernel.py", "exec", dont_inherit=True)
sys.stdout.buffer.write(sys.implementation.cache_tag.encode() + b"\n" + bytes(e._code_to_hash_pyc(code, importlib.util.source_hash(src), False)))
`

// maxBytecode bounds what CompileBytecode accepts and InstallBytecode
// writes (the kernel's .pyc is about 125 KiB).
const maxBytecode = 4 << 20

// validTag reports whether tag is a cache tag we accept (cpython-311): 1 to
// 64 of [a-z0-9_.-]. Not a regexp: the check runs on a sandbox's cold start
// (the early kernel start), where compiling one cost ~0.2 ms.
func validTag[T string | []byte](tag T) bool {
	if len(tag) == 0 || len(tag) > 64 {
		return false
	}
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// CompileBytecode compiles the kernel with python, returning Python's cache
// tag and the .pyc's bytes.
func CompileBytecode(ctx context.Context, python string) (tag string, pyc []byte, err error) {
	cmd := exec.CommandContext(ctx, python, "-I", "-S", "-c", compileScript)
	cmd.Stdin = kernelReader()
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if err := cmd.Run(); err != nil {
		return "", nil, fmt.Errorf("compiling the kernel with %s: %w: %s", python, err, strings.TrimSpace(stderr.String()))
	}
	t, b, ok := bytes.Cut(out.Bytes(), []byte("\n"))
	if !ok || !validTag(t) || len(b) < 16 || len(b) > maxBytecode {
		return "", nil, errors.New("compiling the kernel: unexpected output")
	}
	return string(t), b, nil
}

// DefaultScriptDir is where a kernel started with Options.ScriptDir ""
// keeps its source ("" when there is no cache directory).
func DefaultScriptDir() string {
	return resolveScriptDir("")
}

func resolveScriptDir(dir string) string {
	if dir == "" {
		if d, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(d, "code-sandboxes", "kernel")
		}
	}
	return dir
}

// InstallBytecode writes the kernel's source and pyc (from CompileBytecode)
// into dir ("" = DefaultScriptDir), for kernels started with that
// ScriptDir.
func InstallBytecode(dir, tag string, pyc []byte) error {
	dir = resolveScriptDir(dir)
	if dir == "" || !validTag(tag) || len(pyc) > maxBytecode {
		return errors.New("kernel bytecode: bad directory, tag or size")
	}
	cache := filepath.Join(dir, "__pycache__")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	// Readers, not a []byte of the source: no copy of its 100 KB.
	if err := writeAtomic(filepath.Join(dir, kernelModule()+".py"), kernelReader()); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(cache, kernelModule()+"."+tag+".pyc"), bytes.NewReader(pyc)); err != nil {
		return err
	}
	// The source is current: kernelArgs needn't read it back to compare.
	scriptOnce.Store(dir, func() error { return nil })
	return nil
}

func writeAtomic(path string, r io.Reader) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".kernel-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// Version names this build's kernel (its source's hash).
func Version() string { return kernelModule() }
