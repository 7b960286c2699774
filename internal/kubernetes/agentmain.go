package kubernetes

import (
	"fmt"
	"os"

	"github.com/code-sandboxes/code-sandboxes/internal/agent/standalone"
)

// Main runs the pod's agent when this process was started as one (roleEnv
// says so) and exits; it returns normally otherwise. The public package
// calls it from init, so the code-sandboxes CLI — or any static program
// built on the package — can be the agent an exported image carries.
func Main() {
	if os.Getenv(roleEnv) == roleProbe {
		os.Exit(standalone.ProbeConnect(os.Args[1:]))
	}
	if os.Getenv(roleEnv) != roleAgent {
		return
	}
	// The role is only meaningful as a pod's first process: refuse to run
	// an agent anywhere else (a variable leaked into a host's environment).
	if os.Getpid() != 1 {
		fmt.Fprintf(os.Stderr, "code-sandboxes: %s=%s runs only as a pod's init (PID 1); it is started by the kubernetes variant\n", roleEnv, roleAgent)
		os.Exit(1)
	}
	os.Exit(standalone.Main(os.Args[1:]))
}
