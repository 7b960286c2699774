package environment

import (
	"context"
	"errors"
	"io"
)

// BuildOptions tune a build.
type BuildOptions struct {
	// Progress receives progress: a bar when it is a terminal, plain lines
	// otherwise; nil = silent.
	Progress io.Writer
	// Force rebuilds even when a build with the same id exists.
	Force bool
}

// Build builds spec (or finds the cached build with the same id) and points
// spec.Name at it.
func (s *Store) Build(ctx context.Context, spec *Spec, opt BuildOptions) (*Build, error) {
	return nil, errors.New("not implemented yet")
}

// Ensure resolves ref; when it names a built-in environment ("python") that
// was never built, it builds it first, saying so on opt.Progress.
func (s *Store) Ensure(ctx context.Context, ref string, opt BuildOptions) (*Build, error) {
	return s.Resolve(ref)
}
