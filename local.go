package sandboxes

import (
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/internal/local/envstore"
)

func init() {
	// A binary that uses this package is also the local variant's sandbox
	// agent and supervisor: when re-executed in one of those roles, it runs
	// that role here and exits, before the program's main.
	local.Main()
	local.UseEnvironmentStore(envstore.Store{})
	driver.Register(local.Variant{})
}

// UseLocalSandboxBinaryBeside makes local sandboxes' own processes run from
// the code-sandboxes-sandbox (cmd/code-sandboxes-sandbox, built from the
// same source) in the same directory as this program's executable, when
// there is one and neither LocalConfig.SandboxBinary nor
// $CODE_SANDBOXES_SANDBOX_BINARY names another. A stale one (another
// build's protocol) fails Create with ErrInvalidConfig and what to do; it
// never runs. The code-sandboxes CLI and serve call it first thing.
func UseLocalSandboxBinaryBeside() { local.UseSandboxBinaryBeside() }
