// Package docker adds the docker variant to sandboxes: a container per
// sandbox on a local Docker Engine, running our agent as its init.
//
//	import (
//		sandboxes "github.com/code-sandboxes/code-sandboxes"
//		"github.com/code-sandboxes/code-sandboxes/docker"
//	)
//
//	sb, err := sandboxes.Create(ctx, sandboxes.Config{Variant: "docker", Options: docker.Options{Runtime: "runsc"}})
//
// Importing it also makes a static program its own container agent: the
// variant bind-mounts the program into each container, where this
// package's init runs the agent role before main.
package docker

import (
	"github.com/code-sandboxes/code-sandboxes/internal/docker"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
)

// Options are the docker variant's settings (Config.Options).
type Options = docker.Options

func init() {
	docker.Main()
	driver.Register(docker.Variant{})
}
