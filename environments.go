package sandboxes

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
)

// EnvironmentBuild is one built environment: a content-addressed root
// filesystem, named by its build id.
type EnvironmentBuild = environment.Build

// Errors of environment builds, matchable with errors.Is.
var (
	ErrEnvironmentNotFound = environment.ErrNotFound
	ErrInvalidSpec         = environment.ErrInvalidSpec
	ErrBuildFailed         = environment.ErrBuildFailed
)

// BuildOptions tune BuildEnvironment.
type BuildOptions struct {
	// Dir is the environment store ("" = Config.EnvironmentDir's default).
	Dir string
	// Progress receives progress (a bar on a terminal, lines otherwise).
	Progress io.Writer
	// Force rebuilds even when the same build id exists.
	Force bool
	// Config, when its variant builds environments on its own host (e2b:
	// an E2B template in the API key's team), builds there instead of in
	// the local store; its Options carry the variant's settings and
	// Progress gets the build's log. The answer's Name (name:tag) pins
	// the build as Config.Environment; its ID is the host's build id.
	Config *Config
}

// BuildEnvironment builds the environment described by the YAML spec file
// (or returns the cached build with the same id) and points its name at it.
func BuildEnvironment(ctx context.Context, specFile string, opt BuildOptions) (*EnvironmentBuild, error) {
	spec, err := environment.ReadSpec(specFile)
	if err != nil {
		return nil, err
	}
	if opt.Config != nil && NormalizeVariant(opt.Config.Variant) != "" && NormalizeVariant(opt.Config.Variant) != "local" {
		return buildOnVariant(ctx, spec, opt)
	}
	st, err := environment.Open(opt.Dir)
	if err != nil {
		return nil, err
	}
	return st.Build(ctx, spec, environment.BuildOptions{Progress: opt.Progress, Force: opt.Force})
}

// BuildBuiltinEnvironment builds a built-in environment ("python").
func BuildBuiltinEnvironment(ctx context.Context, name string, opt BuildOptions) (*EnvironmentBuild, error) {
	spec, ok := environment.Builtin(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a built-in environment; the built-in one is python", ErrEnvironmentNotFound, name)
	}
	st, err := environment.Open(opt.Dir)
	if err != nil {
		return nil, err
	}
	return st.Build(ctx, spec, environment.BuildOptions{Progress: opt.Progress, Force: opt.Force})
}

// EnsureEnvironment returns the build a name or id points at, building a
// built-in environment ("python") on first use.
func EnsureEnvironment(ctx context.Context, ref string, opt BuildOptions) (*EnvironmentBuild, error) {
	st, err := environment.Open(opt.Dir)
	if err != nil {
		return nil, err
	}
	return st.Ensure(ctx, ref, environment.BuildOptions{Progress: opt.Progress, Force: opt.Force})
}

// EnvironmentBuilds lists the store's builds, newest first, and which name
// points at which build id.
func EnvironmentBuilds(dir string) ([]*EnvironmentBuild, map[string]string, error) {
	st, err := environment.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	builds, err := st.List()
	return builds, st.Names(), err
}

// RemoveEnvironment deletes a build (by name or id) and the names pointing
// at it. Images a variant made from it (docker) stay until removed there.
func RemoveEnvironment(dir, ref string) (*EnvironmentBuild, error) {
	st, err := environment.Open(dir)
	if err != nil {
		return nil, err
	}
	return st.Remove(ref)
}

// buildOnVariant builds spec with a variant that builds on its own host.
func buildOnVariant(ctx context.Context, spec *environment.Spec, opt BuildOptions) (*EnvironmentBuild, error) {
	cfg := *opt.Config
	if opt.Progress != nil {
		cfg.BuildOutput = opt.Progress
	}
	ds, err := cfg.spec()
	if err != nil {
		return nil, err
	}
	v := driver.Lookup(ds.Variant)
	if v == nil {
		return nil, fmt.Errorf("%w: variant %q is not compiled in (import its package)", ErrInvalidConfig, ds.Variant)
	}
	b, ok := v.(driver.EnvironmentBuilder)
	if !ok {
		return nil, fmt.Errorf("%w: variant %s builds no environments of its own; build locally (no Config) and run them with local, docker or kubernetes", ErrNotSupported, ds.Variant)
	}
	env, err := b.BuildEnvironment(ctx, ds, spec, opt.Force)
	if err != nil {
		return nil, err
	}
	return &EnvironmentBuild{ID: env.BuildID, Name: env.Name, Description: env.Description, Base: env.Description,
		CreatedAt: time.Now().UTC(), Env: spec.Env}, nil
}
