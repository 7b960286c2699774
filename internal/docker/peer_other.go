//go:build !linux

package docker

import (
	"fmt"
	"net"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// The host side's checks of a sandbox's agent socket (SO_PEERCRED) and its
// network supervisor (pidfds, joining the container's network namespace)
// are Linux calls on a local engine's processes. Elsewhere they refuse
// rather than skip the check: with an engine in a VM (Docker Desktop on
// macOS) there is no container process here to check anyway.
var errNeedsLinux = fmt.Errorf("%w: the docker variant's agent socket check and network supervisor need a Linux host (SO_PEERCRED, pidfd, network namespaces)", sberr.ErrNotSupported)

func checkPeerCred(*net.UnixConn, int) error { return errNeedsLinux }

func pidfdOpen(int) (int, error) { return -1, errNeedsLinux }
