package kubernetes

import "github.com/code-sandboxes/code-sandboxes/internal/driver"

// Options are the kubernetes variant's own settings (a pod per sandbox on
// any cluster; kubernetes.Options in the public package of that name).
type Options struct {
	// Kubeconfig is the kubeconfig file; "" = $KUBECONFIG, else
	// ~/.kube/config, else the in-cluster service account.
	Kubeconfig string
	// Context is the kubeconfig context; "" = its current context.
	Context string
	// Namespace holds the sandboxes' pods; "" = the kubeconfig's, else
	// "default".
	Namespace string
	// Image is the pod image; it must contain the agent at
	// /opt/code-sandboxes/agent (`code-sandboxes environments export`
	// makes one). "" = code-sandboxes-env:<build id> of Environment.
	Image string
	// ImagePullPolicy: Always, IfNotPresent (default) or Never.
	ImagePullPolicy string
	// RuntimeClassName selects gVisor, Kata … where the cluster has them.
	RuntimeClassName string
	// UserNamespaces runs each pod in its own user namespace (hostUsers:
	// false): uid 1000 inside is an unprivileged, per-pod range on the node,
	// not the node's uid 1000. Set it where the nodes support it
	// (Kubernetes ≥ 1.33, or 1.30+ with the UserNamespacesSupport gate;
	// containerd ≥ 2.0 or CRI-O ≥ 1.25; Linux ≥ 6.3 for idmapped tmpfs);
	// elsewhere pods fail to start with the runtime's reason.
	UserNamespaces bool
	NodeSelector   map[string]string
	Tolerations    []Toleration
	// NetworkPolicyEnforced asserts that the cluster's network plugin
	// enforces NetworkPolicy; without it (or a plugin the variant knows to
	// enforce) network none and allowlist are refused, not silently open.
	NetworkPolicyEnforced bool
	// WarmPool keeps this many ready sandboxes per environment and hands
	// one out on Create (0 = none).
	WarmPool int
}

// Toleration is a pod toleration (core/v1 Toleration's fields).
type Toleration struct {
	Key, Operator, Value, Effect string
	TolerationSeconds            *int64
}

func optionsOf(spec driver.Spec) (Options, error) { return driver.OptionsOf[Options](spec) }
