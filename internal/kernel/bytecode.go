package kernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// A kernel's first start compiles kernel.py (about 2,000 lines: several
// milliseconds of CPU, a large share of a sandbox's cold start) unless a
// .pyc is already in its script directory, which a fresh sandbox's home
// never has. So the host compiles it once, with the same interpreter the
// sandbox will run, and the sandbox's agent writes it next to the source
// before the first kernel starts (InstallBytecode).
//
// The .pyc is "unchecked hash-based" (PEP 552): Python loads it without
// comparing it with the source's mtime. It is made from kernelSource, which
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

// Compiled on first use, as the package's other regexps: this package is
// linked into every process of a sandbox, where a package-level regexp
// is compiled at start (a counted repetition compiles to that many copies).
var tagRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`) })

// CompileBytecode compiles the kernel with python, returning Python's cache
// tag and the .pyc's bytes.
func CompileBytecode(ctx context.Context, python string) (tag string, pyc []byte, err error) {
	cmd := exec.CommandContext(ctx, python, "-I", "-S", "-c", compileScript)
	cmd.Stdin = strings.NewReader(kernelSource)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if err := cmd.Run(); err != nil {
		return "", nil, fmt.Errorf("compiling the kernel with %s: %w: %s", python, err, strings.TrimSpace(stderr.String()))
	}
	t, b, ok := bytes.Cut(out.Bytes(), []byte("\n"))
	if !ok || !tagRE().Match(t) || len(b) < 16 || len(b) > maxBytecode {
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
	if dir == "" || !tagRE().MatchString(tag) || len(pyc) > maxBytecode {
		return errors.New("kernel bytecode: bad directory, tag or size")
	}
	cache := filepath.Join(dir, "__pycache__")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, kernelModule()+".py"), []byte(kernelSource)); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(cache, kernelModule()+"."+tag+".pyc"), pyc)
}

func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".kernel-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
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
