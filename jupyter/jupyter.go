// Package jupyter adds the jupyter variant to sandboxes: code runs on an
// existing Jupyter Server, through its REST API and kernel WebSocket, with
// token auth. Contexts are kernels; files go through the contents API.
//
//	import (
//		sandboxes "github.com/code-sandboxes/code-sandboxes"
//		"github.com/code-sandboxes/code-sandboxes/jupyter"
//	)
//
//	sb, err := sandboxes.Create(ctx, sandboxes.Config{Variant: "jupyter",
//		Options: jupyter.Options{URL: "http://127.0.0.1:8888", Token: token}})
//
// The server is the caller's own and isolates nothing: its kernels run as
// the server's user, with its files and network. The variant refuses what
// it can't give (network policies, resource limits, lifetimes, commands,
// ports, pause and snapshots) with sandboxes.ErrNotSupported and the
// reason.
package jupyter

import (
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/jupyter"
)

// Options are the jupyter variant's settings (Config.Options).
type Options = jupyter.Options

func init() { driver.Register(jupyter.Variant{}) }

// Network is what Info.Network says of a jupyter sandbox: the server's own
// network, which the variant neither grants nor restricts.
const Network = jupyter.Network
