// Package envstore gives the local variant its environments other than the
// host's: the builds of the environment store (internal/environment). It is
// apart from internal/local so that the sandbox binary, which links only
// that package, doesn't link the store (see local.EnvironmentStore).
package envstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// hostEnvironment is the local variant's name for the host's directories:
// a build by that name is reachable by its id only.
const hostEnvironment = "host"

// maxBuildTime bounds Create's wait for a first-use build of a built-in
// environment (a Debian bootstrap plus packages takes minutes; an hour means
// something is stuck).
const maxBuildTime = time.Hour

// Store is local.EnvironmentStore over the environment store.
type Store struct{}

// Resolve implements local.EnvironmentStore.
func (Store) Resolve(ctx context.Context, spec driver.Spec) (local.Environment, error) {
	st, err := environment.Open(spec.EnvironmentDir)
	if err != nil {
		return local.Environment{}, err
	}
	var out io.Writer = os.Stderr
	if spec.BuildOutput != nil {
		out = spec.BuildOutput
	}
	ctx, cancel := context.WithTimeout(ctx, maxBuildTime)
	defer cancel()
	b, err := st.Ensure(ctx, spec.Environment, environment.BuildOptions{Progress: out})
	if errors.Is(err, environment.ErrNotFound) || errors.Is(err, environment.ErrInvalidSpec) {
		return local.Environment{}, fmt.Errorf("%w: %w; the local variant has: %s", sberr.ErrInvalidConfig, err, strings.Join(environmentNames(st), ", "))
	}
	if err != nil {
		return local.Environment{}, fmt.Errorf("environment %q: %w", spec.Environment, err)
	}
	return local.Environment{Name: spec.Environment, BuildID: b.ID, Rootfs: b.Rootfs(), Env: b.Env}, nil
}

// environmentNames lists what Environment may name: host and every name in
// the store.
func environmentNames(st *environment.Store) []string {
	var names []string
	for n := range st.Names() {
		if n != hostEnvironment {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return append([]string{hostEnvironment}, names...)
}

// List implements local.EnvironmentStore: the builds of the store at dir.
// A store that does not exist yet lists nothing (and is not created by
// listing).
func (Store) List(dir string) ([]driver.Environment, error) {
	if dir == "" {
		dir = environment.DefaultDir()
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	st, err := environment.Open(dir)
	if err != nil {
		return nil, err
	}
	builds, err := st.List()
	if err != nil {
		return nil, fmt.Errorf("environment store %s: %w", dir, err)
	}
	byID := map[string][]string{}
	for n, id := range st.Names() {
		// "host" always means the host's directories: a build by that name
		// is reachable by its id only.
		if n != hostEnvironment {
			byID[id] = append(byID[id], n)
		}
	}
	var out []driver.Environment
	for _, b := range builds {
		desc := b.Description
		if desc == "" {
			desc = b.Base
		}
		names := byID[b.ID]
		sort.Strings(names)
		if len(names) == 0 {
			// Superseded by a newer build of its name: reachable by id.
			names = []string{b.ShortID()}
			desc = fmt.Sprintf("%s (an earlier build of %s)", desc, b.Name)
		}
		for _, n := range names {
			out = append(out, driver.Environment{Name: n, Variant: "local", Description: desc, BuildID: b.ID})
		}
	}
	return out, nil
}
