package sandboxes

import "github.com/code-sandboxes/code-sandboxes/internal/kubernetes"

func init() {
	// A static binary that uses this package is also the kubernetes
	// variant's pod agent: an image exported with `code-sandboxes
	// environments export` carries it as /opt/code-sandboxes/agent, and the
	// pod starts it with the role in its environment; it runs that role
	// here and exits, before the program's main.
	kubernetes.Main()
	register(kubernetes.Variant{})
}
