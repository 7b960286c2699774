//go:build !localonly

package main

// The CLI offers every variant of this module; a library user imports only
// those it wants (local comes with the package). Built with -tags
// localonly (as `make run` does, for a fast first build) it has local only,
// and no serve, interpret or mcp.
import (
	"github.com/spf13/cobra"

	_ "github.com/code-sandboxes/code-sandboxes/docker"
	_ "github.com/code-sandboxes/code-sandboxes/e2b"
	_ "github.com/code-sandboxes/code-sandboxes/jupyter"
	_ "github.com/code-sandboxes/code-sandboxes/kubernetes"
)

func init() {
	serverCommands = []func() *cobra.Command{serveCmd, interpretCmd, mcpCmd}
}
