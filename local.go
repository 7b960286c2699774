package sandboxes

import (
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

func init() {
	// A binary that uses this package is also the local variant's sandbox
	// agent and supervisor: when re-executed in one of those roles, it runs
	// that role here and exits, before the program's main.
	local.Main()
	driver.Register(local.Variant{})
}
