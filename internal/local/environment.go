package local

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
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// hostEnvironment is the local variant's default: the host's system
// directories read-only, with the host's python3.
const hostEnvironment = "host"

// maxBuildTime bounds Create's wait for a first-use build of a built-in
// environment (a Debian bootstrap plus packages takes minutes; an hour means
// something is stuck).
const maxBuildTime = time.Hour

// sandboxEnvironment is what an environment contributes to a sandbox.
type sandboxEnvironment struct {
	Name    string            // "host" or the name/id the caller gave
	BuildID string            // "" for the host
	Rootfs  string            // "" = the host's system directories
	Env     map[string]string // the build's variables, under the user's
}

// resolveEnvironment finds (building a built-in one on first use) the
// environment spec names. "" and "host" are the host's system directories.
func resolveEnvironment(ctx context.Context, spec driver.Spec) (sandboxEnvironment, error) {
	if spec.Environment == "" || spec.Environment == hostEnvironment {
		return sandboxEnvironment{Name: hostEnvironment}, nil
	}
	st, err := environment.Open(spec.EnvironmentDir)
	if err != nil {
		return sandboxEnvironment{}, err
	}
	var out io.Writer = os.Stderr
	if spec.BuildOutput != nil {
		out = spec.BuildOutput
	}
	ctx, cancel := context.WithTimeout(ctx, maxBuildTime)
	defer cancel()
	b, err := st.Ensure(ctx, spec.Environment, environment.BuildOptions{Progress: out})
	if errors.Is(err, environment.ErrNotFound) || errors.Is(err, environment.ErrInvalidSpec) {
		return sandboxEnvironment{}, fmt.Errorf("%w: %w; the local variant has: %s", sberr.ErrInvalidConfig, err, strings.Join(environmentNames(st), ", "))
	}
	if err != nil {
		return sandboxEnvironment{}, fmt.Errorf("environment %q: %w", spec.Environment, err)
	}
	return sandboxEnvironment{Name: spec.Environment, BuildID: b.ID, Rootfs: b.Rootfs(), Env: b.Env}, nil
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

// environments lists host and the builds of the store at dir. A store that
// does not exist yet lists nothing (and is not created by listing).
func environments(dir string) ([]driver.Environment, error) {
	out := []driver.Environment{{Name: hostEnvironment, Variant: "local", Description: "the host's system directories (/usr, /etc, …) read-only, with the host's python3"}}
	if dir == "" {
		dir = environment.DefaultDir()
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	st, err := environment.Open(dir)
	if err != nil {
		return out, err
	}
	builds, err := st.List()
	if err != nil {
		return out, fmt.Errorf("environment store %s: %w", dir, err)
	}
	byID := map[string][]string{}
	for n, id := range st.Names() {
		// "host" always means the host's directories: a build by that name
		// is reachable by its id only.
		if n != hostEnvironment {
			byID[id] = append(byID[id], n)
		}
	}
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
