package sandboxes_test

import (
	"context"
	"errors"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// Network fields that don't go together are refused before anything is
// created, with the reason: DeniedHosts only with network all, allowed
// hosts with all only as exceptions to denied ones.
func TestConfigNetworkFields(t *testing.T) {
	for name, c := range map[string]sandboxes.Config{
		"denied with none":      {NetworkPolicy: sandboxes.NetworkNone, DeniedHosts: []string{"1.2.3.4"}},
		"denied with allowlist": {NetworkPolicy: sandboxes.NetworkAllowlist, AllowedHosts: []string{"pypi.org"}, DeniedHosts: []string{"1.2.3.4"}},
		"allowed with all only": {NetworkPolicy: sandboxes.NetworkAll, AllowedHosts: []string{"pypi.org"}},
		"allowed with none":     {NetworkPolicy: sandboxes.NetworkNone, AllowedHosts: []string{"pypi.org"}},
		"private with none":     {NetworkPolicy: sandboxes.NetworkNone, AllowPrivate: true},
	} {
		c.Variant = "local"
		if _, err := sandboxes.Create(context.Background(), c); !errors.Is(err, sandboxes.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}
