package local

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// hostEnvironment is the local variant's default: the host's system
// directories read-only, with the host's python3.
const hostEnvironment = "host"

// Environment is what an environment contributes to a sandbox.
type Environment struct {
	Name    string            // "host" or the name/id the caller gave
	BuildID string            // "" for the host
	Rootfs  string            // "" = the host's system directories
	Env     map[string]string // the build's variables, under the user's
}

type sandboxEnvironment = Environment

// EnvironmentStore is where the variant finds the environments other than
// the host's directories: the environment store (internal/environment,
// through envstore.Store), which the package registering the variant
// gives to UseEnvironmentStore. It is not imported here because this
// package is also the whole of the sandbox binary (cmd/code-sandboxes-
// sandbox), and every process of a sandbox would run the package inits of
// the store and of the image libraries it links (~0.5 ms of CPU each,
// three of them on the way to a cold start's first result).
type EnvironmentStore interface {
	// Resolve finds (building a built-in one on first use) the
	// environment spec names, never "" or "host".
	Resolve(ctx context.Context, spec driver.Spec) (Environment, error)
	// List lists the environments of the store at dir ("" = the default
	// one), without the host's.
	List(dir string) ([]driver.Environment, error)
}

var envStore atomic.Pointer[EnvironmentStore]

// UseEnvironmentStore makes s where Create and Environments find
// environments other than the host's.
func UseEnvironmentStore(s EnvironmentStore) { envStore.Store(&s) }

// resolveEnvironment finds (building a built-in one on first use) the
// environment spec names. "" and "host" are the host's system directories.
func resolveEnvironment(ctx context.Context, spec driver.Spec) (sandboxEnvironment, error) {
	if spec.Environment == "" || spec.Environment == hostEnvironment {
		return sandboxEnvironment{Name: hostEnvironment}, nil
	}
	s := envStore.Load()
	if s == nil {
		return sandboxEnvironment{}, fmt.Errorf("%w: environment %q: this program has no environment store, only %q (a program using the local variant through the code-sandboxes package has one)", sberr.ErrInvalidConfig, spec.Environment, hostEnvironment)
	}
	return (*s).Resolve(ctx, spec)
}

// mergeEnv returns the build's variables overridden by the user's.
func mergeEnv(build, user map[string]string) map[string]string {
	if len(build) == 0 {
		return user
	}
	out := make(map[string]string, len(build)+len(user))
	for k, v := range build {
		out[k] = v
	}
	for k, v := range user {
		out[k] = v
	}
	return out
}

// environments lists host and the builds of the store at dir.
func environments(dir string) ([]driver.Environment, error) {
	out := []driver.Environment{{Name: hostEnvironment, Variant: "local", Description: "the host's system directories (/usr, /etc, …) read-only, with the host's python3"}}
	s := envStore.Load()
	if s == nil {
		return out, nil
	}
	more, err := (*s).List(dir)
	return append(out, more...), err
}
