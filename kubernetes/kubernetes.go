// Package kubernetes adds the kubernetes variant to sandboxes: a hardened
// pod per sandbox on any cluster, reached through the API server.
//
//	import (
//		sandboxes "github.com/code-sandboxes/code-sandboxes"
//		"github.com/code-sandboxes/code-sandboxes/kubernetes"
//	)
//
//	sb, err := sandboxes.Create(ctx, sandboxes.Config{Variant: "kubernetes",
//		Options: kubernetes.Options{Namespace: "sandboxes", WarmPool: 2}})
//
// It brings in client-go; programs that don't import it don't pay for it.
// Importing it also makes a static program a pod agent: an image made by
// `code-sandboxes environments export` carries the program, and this
// package's init runs the agent role before main.
package kubernetes

import (
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/kubernetes"
)

// Options are the kubernetes variant's settings (Config.Options).
type Options = kubernetes.Options

// NetworkPolicyEnforcedEnv, set to 1 in the environment, asserts as
// Options.NetworkPolicyEnforced does that the cluster's network plugin
// enforces NetworkPolicy: how serve and the CLI, which take no Options,
// say so for a plugin the variant can neither see nor prove.
const NetworkPolicyEnforcedEnv = kubernetes.EnforcedEnv

// Toleration is a pod toleration (core/v1 Toleration's fields).
type Toleration = kubernetes.Toleration

func init() {
	kubernetes.Main()
	driver.Register(kubernetes.Variant{})
}
