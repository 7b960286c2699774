package docker

import "github.com/code-sandboxes/code-sandboxes/internal/driver"

// Options are the docker variant's own settings (docker.Options in the
// public package of that name).
type Options struct {
	// Host is the Docker Engine address; "" = $DOCKER_HOST, else the
	// local socket.
	Host string
	// AgentPath is a static Linux build of this program or of
	// code-sandboxes-agent, bind-mounted into containers as their init;
	// "" = this program itself when it is static.
	AgentPath string
	// Runtime is the OCI runtime (for example runsc); "" = the engine's
	// default.
	Runtime string
}

func optionsOf(spec driver.Spec) (Options, error) { return driver.OptionsOf[Options](spec) }
