// Package environments builds and keeps environments: content-addressed
// root filesystems described by a YAML spec (a base, packages, files,
// steps), run by the local, docker and kubernetes variants as
// Config.Environment; with a Config whose variant builds on its own host
// (e2b: an E2B template), the build runs there.
//
//	b, err := environments.BuildFile(ctx, "env.yaml", environments.Options{})
//	sb, err := sandboxes.Create(ctx, sandboxes.Config{Environment: b.Name})
package environments

import (
	"context"
	"fmt"
	"io"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
)

// Build is one built environment: a content-addressed root filesystem,
// named by its build id. It is the store's own record (its methods say
// where the rootfs is), so it is the internal type itself.
type Build = environment.Build

// Errors of environment builds, matchable with errors.Is.
var (
	ErrNotFound    = environment.ErrNotFound
	ErrInvalidSpec = environment.ErrInvalidSpec
	ErrBuildFailed = environment.ErrBuildFailed
)

// Options tune a build.
type Options struct {
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
	Config *sandboxes.Config
}

func (o Options) store() environment.BuildOptions {
	return environment.BuildOptions{Progress: o.Progress, Force: o.Force}
}

// BuildFile builds the environment described by the YAML spec file (or
// returns the cached build with the same id) and points its name at it.
func BuildFile(ctx context.Context, specFile string, opt Options) (*Build, error) {
	spec, err := environment.ReadSpec(specFile)
	if err != nil {
		return nil, err
	}
	if opt.Config != nil {
		if v := sandboxes.NormalizeVariant(opt.Config.Variant); v != "" && v != "local" {
			return buildOnVariant(ctx, spec, opt)
		}
	}
	st, err := environment.Open(opt.Dir)
	if err != nil {
		return nil, err
	}
	return st.Build(ctx, spec, opt.store())
}

// BuildBuiltin builds a built-in environment ("python").
func BuildBuiltin(ctx context.Context, name string, opt Options) (*Build, error) {
	spec, ok := environment.Builtin(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a built-in environment; the built-in one is python", ErrNotFound, name)
	}
	st, err := environment.Open(opt.Dir)
	if err != nil {
		return nil, err
	}
	return st.Build(ctx, spec, opt.store())
}

// Ensure returns the build a name or id points at, building a built-in
// environment ("python") on first use.
func Ensure(ctx context.Context, ref string, opt Options) (*Build, error) {
	st, err := environment.Open(opt.Dir)
	if err != nil {
		return nil, err
	}
	return st.Ensure(ctx, ref, opt.store())
}

// List lists the store's builds, newest first, and which name points at
// which build id.
func List(dir string) ([]*Build, map[string]string, error) {
	st, err := environment.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	builds, err := st.List()
	return builds, st.Names(), err
}

// Remove deletes a build (by name or id) and the names pointing at it.
// Images a variant made from it (docker) stay until removed there.
func Remove(dir, ref string) (*Build, error) {
	st, err := environment.Open(dir)
	if err != nil {
		return nil, err
	}
	return st.Remove(ref)
}

// buildOnVariant builds spec with a variant that builds on its own host.
func buildOnVariant(ctx context.Context, spec *environment.Spec, opt Options) (*Build, error) {
	cfg := *opt.Config
	if opt.Progress != nil {
		cfg.BuildOutput = opt.Progress
	}
	v, ds, err := driver.ConfigSpec(&cfg)
	if err != nil {
		return nil, err
	}
	b, ok := v.(driver.EnvironmentBuilder)
	if !ok {
		return nil, fmt.Errorf("%w: variant %s builds no environments of its own; build locally (no Config) and run them with local, docker or kubernetes", sandboxes.ErrNotSupported, ds.Variant)
	}
	env, err := b.BuildEnvironment(ctx, ds, spec, opt.Force)
	if err != nil {
		return nil, err
	}
	return &Build{ID: env.BuildID, Name: env.Name, Description: env.Description, Base: env.Description,
		CreatedAt: time.Now().UTC(), Env: spec.Env}, nil
}
