// Package e2b adds the e2b variant to sandboxes: sandboxes on E2B's cloud
// or on any E2B-compatible server (such as code-sandboxes serve).
//
//	import (
//		sandboxes "github.com/code-sandboxes/code-sandboxes"
//		"github.com/code-sandboxes/code-sandboxes/e2b"
//	)
//
//	sb, err := sandboxes.Create(ctx, sandboxes.Config{Variant: "e2b", Options: e2b.Options{APIKey: key}})
package e2b

import (
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/e2b"
)

// Options are the e2b variant's settings (Config.Options).
type Options = e2b.Options

func init() { driver.Register(e2b.Variant{}) }
