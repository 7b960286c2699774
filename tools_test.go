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
