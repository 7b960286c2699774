// Package docker is the docker variant: each sandbox is a container, made
// through the Docker Engine API from an environment's image, whose init is
// our own static binary bind-mounted read-only (the agent). The host reaches
// the agent on a unix socket in a per-sandbox directory it bind-mounts into
// the container; labels on the container (plus a small host-side record for
// what labels can't change) let any process list, reach and kill sandboxes.
package docker

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/pipinstall"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Labels on every container (and imported image) of the variant. Labels are
// fixed at creation; what SetTimeout changes lives in the host-side record.
const (
	labelCreatedBy = "created-by"
	createdBy      = "code-sandboxes"
	labelID        = "code-sandboxes.id"
	labelName      = "code-sandboxes.name"
	labelCreatedAt = "code-sandboxes.created-at"
	labelEndAt     = "code-sandboxes.end-at"
	labelTagPrefix = "code-sandboxes.tag."
	labelEnv       = "code-sandboxes.environment"
	labelEnvBuild  = "code-sandboxes.env-build"
	labelNetwork   = "code-sandboxes.network"
	labelMemory    = "code-sandboxes.memory"
	labelCPUs      = "code-sandboxes.cpus"
	labelPids      = "code-sandboxes.pids"
	// labelIsolation is set for a level other than the default (gvisor).
	labelIsolation = "code-sandboxes.isolation"
)

const (
	// defaultEnvironment is what a sandbox runs when Config.Environment is
	// empty: the built-in environment, built on first use.
	defaultEnvironment = "python"
	// defaultPids keeps a fork bomb inside, as on the local variant.
	defaultPids = 1024
	// Sizes of the tmpfs mounts, as on the local variant (they count
	// against the container's memory limit).
	tmpSize   = 512 << 20
	homeSize  = 1 << 30
	filesSize = 1 << 30
	shmSize   = 64 << 20
	noFile    = 4096
	// startTimeout bounds container start until the agent answers.
	startTimeout = 60 * time.Second
	// apiTimeout bounds one ordinary engine call: a wedged engine must not
	// hang a caller forever.
	apiTimeout = time.Minute
	// importTimeout bounds streaming a rootfs into the engine.
	importTimeout = 30 * time.Minute
	// sweepGrace lets an agent end itself at its lifetime before the sweep
	// takes its container down from outside.
	sweepGrace = 5 * time.Second
	// createGrace protects what a Create in progress has made (a directory
	// without a container yet, a container not started yet) from sweeps.
	createGrace = 2 * time.Minute
)

// Variant is the docker variant.
type Variant struct{}

// Name implements driver.Variant.
func (Variant) Name() string { return "docker" }

// Capabilities implements driver.Variant.
func (Variant) Capabilities() driver.Capabilities {
	return driver.Capabilities{Interrupt: true, Variables: true, Host: true, Commands: true, Files: true,
		Watch: true, SetTimeout: true, Networks: []string{"none", "all", "allowlist"}, Limits: true, Packages: true, IdleTimeout: true,
		Isolations: []string{isolationGVisor}, Volumes: true}
}

// Environments implements driver.Variant: the store's named builds (host
// builds excluded: a container needs a rootfs), and the built-in python
// environment even before its first build.
func (Variant) Environments(ctx context.Context, spec driver.Spec) ([]driver.Environment, error) {
	st, err := environment.Open(spec.EnvironmentDir)
	if err != nil {
		return nil, err
	}
	builds, err := st.List()
	if err != nil {
		return nil, err
	}
	byID := map[string]*environment.Build{}
	for _, b := range builds {
		byID[b.ID] = b
	}
	var out []driver.Environment
	for name, id := range st.Names() {
		b := byID[id]
		if b == nil || b.Host {
			continue
		}
		desc := b.Description
		if desc == "" {
			desc = b.Base
		}
		out = append(out, driver.Environment{Name: name, Variant: "docker", BuildID: id, Description: desc})
	}
	if _, built := st.Names()[defaultEnvironment]; !built {
		if s, ok := environment.Builtin(defaultEnvironment); ok {
			out = append(out, driver.Environment{Name: defaultEnvironment, Variant: "docker", Description: s.Description + " (built on first use)"})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// networkMode maps a network policy to the engine's network mode.
func networkMode(policy string) (string, container.NetworkMode, error) {
	switch policy {
	case "", "none":
		return "none", "none", nil
	case "all", "allowlist":
		// Not the engine's bridge (which reaches the host's docker0 address
		// and so every service listening on 0.0.0.0, private ranges and
		// cloud metadata): no network from the engine, and ours attached
		// from the host (network.go).
		return policy, "none", nil
	}
	return "", "", fmt.Errorf("%w: network policy %q", sberr.ErrInvalidConfig, policy)
}

// agentBinary picks the binary to bind-mount as the containers' init:
// Docker.AgentPath, else this program. It must be a static ELF: the
// environment's rootfs may have no libc, or another one than ours.
func agentBinary(configured string) (string, error) {
	path := configured
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding this program to run as the sandbox's agent: %w", err)
		}
		path = exe
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("%w: agent binary %s: %w", sberr.ErrInvalidConfig, path, err)
	}
	resolved, err = filepath.Abs(resolved)
	if err != nil {
		return "", err
	}
	f, err := elf.Open(resolved)
	if err != nil {
		return "", fmt.Errorf("%w: agent binary %s is not a Linux executable (%v); set docker.Options.AgentPath to a static Linux build of this program or of code-sandboxes-agent", sberr.ErrInvalidConfig, resolved, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			what := "this program"
			if configured != "" {
				what = "docker.Options.AgentPath"
			}
			return "", fmt.Errorf("%w: the docker variant runs %s (%s) inside each container as its init, so it must be statically linked, but it is dynamically linked; build it with CGO_ENABLED=0, or set docker.Options.AgentPath to a static build of this program or of code-sandboxes-agent",
				sberr.ErrInvalidConfig, what, resolved)
		}
	}
	return resolved, nil
}

func checkPackages(spec driver.Spec, network string) error {
	for _, p := range spec.Packages {
		if p == "" || strings.HasPrefix(p, "-") || strings.ContainsAny(p, " \t\r\n\x00") {
			return fmt.Errorf("%w: package %q: give a requirement such as name or name==1.2 (no options, no spaces)", sberr.ErrInvalidConfig, p)
		}
	}
	if len(spec.Packages) > 0 && network == "none" {
		return fmt.Errorf("%w: Packages are pip-installed inside the sandbox, which needs network to reach the package index; set NetworkPolicy all (or use an environment that has them)", sberr.ErrInvalidConfig)
	}
	return nil
}

// Create implements driver.Variant.
func (v Variant) Create(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	network, mode, err := networkMode(spec.Network)
	if err != nil {
		return nil, err
	}
	if err := checkPackages(spec, network); err != nil {
		return nil, err
	}
	for _, vol := range spec.Volumes {
		if err := checkVolumeSource(vol.Source); err != nil {
			return nil, err
		}
	}
	if network != "none" {
		if err := checkNetworked(spec); err != nil {
			return nil, err
		}
	}
	opts, err := optionsOf(spec)
	if err != nil {
		return nil, err
	}
	if opts.Runtime, err = runtimeFor(spec, opts); err != nil {
		return nil, err
	}
	agentPath, err := agentBinary(opts.AgentPath)
	if err != nil {
		return nil, err
	}
	progress := spec.BuildOutput
	if progress == nil {
		progress = os.Stderr
	}
	envName := spec.Environment
	if envName == "" {
		envName = defaultEnvironment
	}
	// The engine first: an unreachable one should fail fast, not after a
	// long environment build.
	eng, err := connect(ctx, spec)
	if err != nil {
		return nil, err
	}
	release := true
	defer func() {
		if release {
			eng.Close()
		}
	}()
	if spec.Isolation == isolationGVisor {
		if err := eng.checkGVisorRuntime(ctx, opts.Runtime); err != nil {
			return nil, err
		}
	}
	rt := runtimeDir()
	if err := ensureRuntimeDir(rt); err != nil {
		return nil, err
	}
	if cs, err := eng.ours(ctx, ""); err == nil {
		eng.sweep(ctx, rt, cs, true)
	}
	st, err := environment.Open(spec.EnvironmentDir)
	if err != nil {
		return nil, err
	}
	b, err := st.Ensure(ctx, envName, environment.BuildOptions{Progress: progress})
	if err != nil {
		if errors.Is(err, environment.ErrNotFound) {
			return nil, fmt.Errorf("%w: environment %q: %w", sberr.ErrInvalidConfig, envName, err)
		}
		return nil, fmt.Errorf("preparing environment %q: %w", envName, err)
	}
	if b.Host {
		return nil, fmt.Errorf("%w: environment %q is a host environment (the host's own system directories), which only the local variant can run; give the docker variant an environment with a rootfs (debian, image or tarball base)", sberr.ErrInvalidConfig, envName)
	}
	ictx, cancel := context.WithTimeout(ctx, importTimeout)
	ref, err := eng.ensureImage(ictx, rt, b, progress)
	cancel()
	if err != nil {
		return nil, err
	}
	inst, err := eng.launch(ctx, launchSpec{spec: spec, opts: opts, rt: rt, image: ref, build: b, agentPath: agentPath, network: network, mode: mode})
	if err != nil {
		return nil, err
	}
	release = false
	if len(spec.Packages) > 0 {
		if err := pipinstall.Install(ctx, inst.c, "", spec.PackageIndex, spec.Packages, spec.WorkingDir); err != nil {
			_ = inst.Kill(context.WithoutCancel(ctx))
			_ = inst.Release()
			return nil, err
		}
	}
	return inst, nil
}
