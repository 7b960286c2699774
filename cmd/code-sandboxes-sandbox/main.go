// Command code-sandboxes-sandbox runs a local sandbox's own processes (the
// supervisor, the agent, the root user's broker and sudo) for a program
// that names it in CODE_SANDBOXES_SANDBOX_BINARY, instead of that program
// re-executing itself.
//
// A sandbox's processes are otherwise the calling program re-executed, and
// each run pays every package init the program links: a program that also
// links heavy packages (the Kubernetes client, plotting, ...) pays them in
// three to five processes per sandbox, in start time and in memory. This
// binary links only the local variant. Build it from the same source as the
// program that uses it (a mismatch fails Create with what to do):
//
//	go build -o /usr/local/libexec/code-sandboxes-sandbox ./cmd/code-sandboxes-sandbox
//	CODE_SANDBOXES_SANDBOX_BINARY=/usr/local/libexec/code-sandboxes-sandbox my-program
package main

import (
	"fmt"
	"os"

	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

func main() {
	// Returns only when not started for one of the roles.
	local.Main()
	fmt.Fprintf(os.Stderr, "code-sandboxes-sandbox runs local sandboxes' processes for a program that names it in %s; it is not meant to be run by hand\n", local.SandboxBinaryEnv)
	os.Exit(2)
}
