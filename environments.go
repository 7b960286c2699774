package sandboxes

import (
	"fmt"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
)

// The environments package builds on a Config's variant (an E2B
// template): it reaches the Config's checked Spec through this hook, as
// it can't call Config's unexported methods.
func init() {
	driver.ConfigSpec = func(c any) (driver.Variant, driver.Spec, error) {
		cfg, ok := c.(*Config)
		if !ok {
			return nil, driver.Spec{}, fmt.Errorf("%w: a *sandboxes.Config is needed, got %T", ErrInvalidConfig, c)
		}
		return cfg.variant()
	}
}
