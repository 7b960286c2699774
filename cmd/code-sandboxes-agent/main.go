// Command code-sandboxes-agent is the in-sandbox agent as a standalone static
// binary, for launchers that start it themselves (containers, pods, tests):
// it serves E2B's envd and code-interpreter protocols on one listener. The
// code-sandboxes CLI carries the same agent (its "pod-agent" role), so an
// image may hold either binary.
//
//	code-sandboxes-agent --listen unix:/run/agent.sock --token-file /run/token
package main

import (
	"os"

	"github.com/code-sandboxes/code-sandboxes/internal/agent/standalone"
)

func main() { os.Exit(standalone.Main(os.Args[1:])) }
