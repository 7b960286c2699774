package sandboxes

import "github.com/code-sandboxes/code-sandboxes/internal/docker"

func init() {
	// A static binary that uses this package is also the docker variant's
	// container agent: the variant bind-mounts it into each container as its
	// init, with the role in the environment; it runs that role here and
	// exits, before the program's main.
	docker.Main()
	register(docker.Variant{})
}
