//go:build linux && !amd64

package isolate

import (
	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/isolate/seccompasm"
)

// seccompFilter assembles the filter (amd64 has it pre-assembled).
func seccompFilter() ([]unix.SockFilter, error) {
	return seccompasm.Assemble(seccompasm.Rules(seccompRules()))
}
