package sandboxes

import "github.com/code-sandboxes/code-sandboxes/internal/e2b"

func init() { register(e2b.Variant{}) }
