package sandboxes_test

import (
	"testing"

	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

func TestLocalTools(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	// The zero Config's network is "none": the tools still work.
	sandboxestest.RunTools(t, localConfig(t))
}

func TestDockerTools(t *testing.T) {
	cfg := dockerConfig(t)
	cfg.NetworkPolicy = "none"
	sandboxestest.RunTools(t, cfg)
}

// TestKubernetesTools: network "all" (the test cluster doesn't enforce
// NetworkPolicy, so "none" is refused there; the suite skips its network
// check).
func TestKubernetesTools(t *testing.T) {
	k8sCluster(t)
	sandboxestest.RunTools(t, k8sConfig(""))
}
