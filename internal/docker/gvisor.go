package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	mobyclient "github.com/moby/moby/client"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// isolationGVisor is Spec.Isolation's gVisor level; on docker it is an
// OCI runtime of the engine, runsc unless Options.Runtime names another.
const (
	isolationGVisor = "gvisor"
	defaultGVisor   = "runsc"
)

// runtimeFor returns the OCI runtime a sandbox of spec runs with ("" = the
// engine's default).
func runtimeFor(spec driver.Spec, opts Options) (string, error) {
	switch spec.Isolation {
	case "", "namespaces":
		return opts.Runtime, nil
	case isolationGVisor:
		if opts.Runtime != "" {
			return opts.Runtime, nil
		}
		return defaultGVisor, nil
	}
	return "", fmt.Errorf("%w: unknown isolation %q; use namespaces or gvisor", sberr.ErrInvalidConfig, spec.Isolation)
}

// checkGVisorRuntime refuses isolation gvisor on an engine that can't give
// it, with what to change: the runtime must be registered, and runsc must
// let the agent create its socket on the host (--host-uds=create), where
// the docker variant reaches it.
func (e *engine) checkGVisorRuntime(ctx context.Context, name string) error {
	info, err := e.c.Info(ctx, mobyclient.InfoOptions{})
	if err != nil {
		return fmt.Errorf("%w: the Docker engine at %s did not say which runtimes it has: %w", sberr.ErrUnavailable, e.host, err)
	}
	rt, ok := info.Info.Runtimes[name]
	if !ok {
		var have []string
		for k := range info.Info.Runtimes {
			have = append(have, k)
		}
		slices.Sort(have)
		return fmt.Errorf("%w: isolation gvisor: the Docker engine at %s has no %q runtime (it has %s); install runsc (apt-get install runsc) and register it in daemon.json: \"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": [\"--host-uds=create\", \"--network=none\"]}} (scripts/with-dockerd.sh does), then reload dockerd (SIGHUP)",
			sberr.ErrNotSupported, e.host, name, strings.Join(have, ", "))
	}
	if rt.Type == "" || rt.Path != "" { // a runc-compatible (legacy) runtime: its flags are visible
		has := func(flag string) bool {
			return slices.ContainsFunc(rt.Args, func(a string) bool { return a == "--"+flag || a == "-"+flag })
		}
		if !has("host-uds=create") && !has("host-uds=all") {
			return fmt.Errorf("%w: isolation gvisor: the engine's %q runtime (args %q) lacks --host-uds=create, without which the agent's socket stays inside gVisor where the docker variant can't reach it; register it with \"runtimeArgs\": [\"--host-uds=create\", \"--network=none\"] in daemon.json and reload dockerd (SIGHUP)",
				sberr.ErrNotSupported, name, rt.Args)
		}
		// The docker variant gives gVisor sandboxes no network (see
		// checkNetworked); --network=none makes runsc hold to that
		// whatever the engine attaches (and runsc's own sandbox network
		// fails to start under some engines).
		if !has("network=none") {
			return fmt.Errorf("%w: isolation gvisor: the engine's %q runtime (args %q) lacks --network=none (the docker variant's gVisor sandboxes have no network); register it with \"runtimeArgs\": [\"--host-uds=create\", \"--network=none\"] in daemon.json and reload dockerd (SIGHUP)",
				sberr.ErrNotSupported, name, rt.Args)
		}
	}
	return nil
}
