// The kernel's Python source: py/*.py, embedded and joined into one module.
package kernel

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"io"
	"strings"
	"sync"
	"unsafe"
)

// The kernel's files, each one part of what the kernel does (py/protocol.py
// says why they make one module). Embedded one string each: no copy of them
// is made on a sandbox's cold start, where the kernel's source is hashed and
// written.
var (
	//go:embed py/protocol.py
	pyProtocol string
	//go:embed py/charts.py
	pyCharts string
	//go:embed py/display.py
	pyDisplay string
	//go:embed py/hooks.py
	pyHooks string
	//go:embed py/tools.py
	pyTools string
	//go:embed py/magics.py
	pyMagics string
	//go:embed py/languages.py
	pyLanguages string
	//go:embed py/interpreters.py
	pyInterpreters string
	//go:embed py/cells.py
	pyCells string
	//go:embed py/commands.py
	pyCommands string
)

// kernelParts is the kernel's source in order: protocol.py first (it
// imports what the others use and must run first); each file ends with a
// newline, and a part separator keeps two blank lines between top-level
// definitions of different files.
var kernelParts = [...]string{
	pyProtocol, partSep, pyCharts, partSep, pyDisplay, partSep, pyHooks, partSep, pyTools, partSep,
	pyMagics, partSep, pyLanguages, partSep, pyInterpreters, partSep, pyCells, partSep, pyCommands,
}

const partSep = "\n\n"

// kernelSourceLen is the length of the joined source.
func kernelSourceLen() int {
	n := 0
	for _, p := range kernelParts {
		n += len(p)
	}
	return n
}

// kernelReader reads the joined source without copying it.
func kernelReader() io.Reader {
	rs := make([]io.Reader, len(kernelParts))
	for i, p := range kernelParts {
		rs[i] = strings.NewReader(p)
	}
	return io.MultiReader(rs...)
}

// kernelSource returns the joined source as one string (a copy: only where
// one string is needed, the -c fallback and tests).
func kernelSource() string { return strings.Join(kernelParts[:], "") }

// isKernelSource reports whether b is the joined source.
func isKernelSource(b []byte) bool {
	if len(b) != kernelSourceLen() {
		return false
	}
	for _, p := range kernelParts {
		if string(b[:len(p)]) != p {
			return false
		}
		b = b[len(p):]
	}
	return true
}

// kernelModule is the file name the kernel is imported as, keyed by content so
// a new build never runs a stale cached copy. Computed on first use: the
// hash would otherwise be paid at the start of every process that links
// this package, each of a sandbox's.
var kernelModule = sync.OnceValue(func() string {
	// Over the strings themselves: a []byte copy of them faulted in 100 KB
	// of fresh heap on a sandbox's cold start (its early kernel start).
	h := sha256.New()
	for _, p := range kernelParts {
		h.Write(unsafe.Slice(unsafe.StringData(p), len(p)))
	}
	var sum [sha256.Size]byte
	return "csbx_kernel_" + hex.EncodeToString(h.Sum(sum[:0])[:8])
})
