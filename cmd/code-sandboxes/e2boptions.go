//go:build !localonly

package main

import "github.com/code-sandboxes/code-sandboxes/e2b"

func init() {
	e2bListAll = func() any { return e2b.Options{ListAll: true} }
}
