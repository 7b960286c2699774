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
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	mobyclient "github.com/moby/moby/client"

	"github.com/code-sandboxes/code-sandboxes/internal/agentconfig"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
	"github.com/code-sandboxes/code-sandboxes/internal/ids"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/pipinstall"
	"github.com/code-sandboxes/code-sandboxes/internal/records"
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

type launchSpec struct {
	spec          driver.Spec
	opts          Options
	rt, image     string
	build         *environment.Build
	agentPath     string
	network       string
	mode          container.NetworkMode
	id, token     string
	dir, workdir  string
	createdAt     time.Time
	endAt         time.Time
	pids          int64
	env           map[string]string
	containerName string
	// hostUID is the sandbox's own host uid and gid (records.DockerUIDs):
	// the contract's uid 1000 and gid 100 inside map to it.
	hostUID int
	// seed is the host path of the environment's /home/user, bound
	// read-only at homeseed.Dir for the agent to copy into the home; ""
	// without one.
	seed string
}

// launch makes the sandbox's directory, container and agent, and returns
// when the agent answers; on any failure it removes what it made.
func (e *engine) launch(ctx context.Context, ls launchSpec) (inst *instance, err error) {
	spec := ls.spec
	ls.id, ls.token = ids.Sandbox('d'), ids.Token(24)
	ls.dir = filepath.Join(ls.rt, ls.id)
	ls.workdir = spec.WorkingDir
	if ls.workdir == "" {
		ls.workdir = "/home/user"
	}
	ls.createdAt = time.Now()
	ls.endAt = ls.createdAt.Add(spec.Lifetime)
	ls.pids = spec.PidsLimit(defaultPids)
	// The environment's variables first; the user's win.
	ls.env = map[string]string{}
	for k, v := range ls.build.Env {
		ls.env[k] = v
	}
	for k, v := range spec.Env {
		ls.env[k] = v
	}
	ls.containerName = "code-sandboxes-" + ls.id

	if err := os.Mkdir(ls.dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the sandbox's directory: %w", err)
	}
	containerID := ""
	defer func() {
		if err == nil {
			return
		}
		// Nothing left running or lying around after a failed create.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
		defer cancel()
		if containerID != "" {
			_ = e.removeContainer(cctx, containerID)
		}
		_ = os.RemoveAll(ls.dir)
	}()
	// A host uid of the sandbox's own (ctragent's userns.go); not under
	// gVisor, whose uids are its own kernel's.
	if spec.Isolation != isolationGVisor {
		if ls.hostUID, err = records.AllocHostUID(ls.rt, ls.dir, records.DockerUIDs); err != nil {
			return nil, err
		}
	}
	run := filepath.Join(ls.dir, runSubdir)
	if err := os.Mkdir(run, 0o755); err != nil {
		return nil, fmt.Errorf("creating the sandbox's directory: %w", err)
	}
	// Whatever our umask: readable by the agent's user once it drops, never
	// writable by it.
	if err := os.Chmod(run, 0o755); err != nil {
		return nil, err
	}
	if err := writeRecord(ls.dir, &record{ID: ls.id, Token: ls.token, Engine: e.host, CreatedAt: ls.createdAt, EndAt: ls.endAt}); err != nil {
		return nil, fmt.Errorf("writing the sandbox's record: %w", err)
	}
	if ls.build != nil && !ls.build.Host {
		if ls.seed, err = homeseed.RootfsHome(ls.build.Rootfs()); err != nil {
			return nil, err
		}
	}
	acfg := agentConfig{Base: agentconfig.Base{ID: ls.id, Token: ls.token, Workdir: ls.workdir, Env: ls.env, Lifetime: spec.Lifetime, IdleTimeout: spec.IdleTimeout,
		NoPrewarm: len(spec.Packages) > 0}, HostUID: ls.hostUID, SeedHome: ls.seed != ""}
	if os.Geteuid() == 0 {
		acfg.SocketMode = 0o600
	}
	if spec.Isolation == isolationGVisor {
		// gVisor lets code of the agent's uid open the agent's
		// descriptors: its kernels' protocol pipes are a uid of its own's
		// (ctragent/owncreds.go).
		acfg.AgentUID = gvisorAgentUID
	}
	if err := writeFileAtomic(filepath.Join(run, configFile), acfg); err != nil {
		return nil, fmt.Errorf("writing the agent's config: %w", err)
	}

	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	created, err := e.c.ContainerCreate(cctx, mobyclient.ContainerCreateOptions{
		Name: ls.containerName, Config: containerConfig(ls), HostConfig: hostConfig(ls),
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("creating the sandbox's container from %s: %w", ls.image, err)
	}
	containerID = created.ID

	// Attach before start, as `docker run` does: the agent's output is the
	// explanation when it dies at once, and AutoRemove deletes the
	// container (and its logs) the moment it exits.
	tail := &logTail{max: 4096}
	attachDone := make(chan struct{})
	// (The context bounds the attach handshake only: the stream, once
	// hijacked, lives until we close it.)
	hctx, hcancel := context.WithTimeout(ctx, apiTimeout)
	att, aerr := e.c.ContainerAttach(hctx, containerID, mobyclient.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
	hcancel()
	if aerr == nil {
		go func() {
			defer close(attachDone)
			_, _ = stdcopy.StdCopy(tail, tail, att.Reader)
		}()
		defer att.Close()
	} else {
		close(attachDone)
	}
	// Registered before start, so that an agent dying at once is noticed
	// at once rather than at the health wait's timeout.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	waitRes := e.c.ContainerWait(wctx, containerID, mobyclient.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	withLog := func(err error) error {
		// Let the last output arrive; bounded, the stream may stay open.
		select {
		case <-attachDone:
		case <-time.After(2 * time.Second):
		}
		s := tail.String()
		if strings.Contains(s, homeseed.TooBig) {
			// The caller's configuration, not the engine, is at fault.
			return fmt.Errorf("%w: %s", sberr.ErrInvalidConfig, strings.TrimSpace(s))
		}
		if s != "" {
			return fmt.Errorf("%w; the container's output: %s", err, s)
		}
		return err
	}

	sctx, cancel := context.WithTimeout(ctx, apiTimeout)
	_, err = e.c.ContainerStart(sctx, containerID, mobyclient.ContainerStartOptions{})
	cancel()
	if err != nil {
		return nil, withLog(fmt.Errorf("%w: starting the sandbox's container: %w", sberr.ErrUnavailable, err))
	}
	ictx, cancel := context.WithTimeout(ctx, apiTimeout)
	insp, err := e.c.ContainerInspect(ictx, containerID, mobyclient.ContainerInspectOptions{})
	cancel()
	if err != nil {
		return nil, withLog(fmt.Errorf("%w: the sandbox's container ended during start-up: %w", sberr.ErrUnavailable, err))
	}
	pid := 0
	if insp.Container.State != nil {
		pid = insp.Container.State.Pid
	}
	if ls.network != "none" {
		if err := startNetwork(ctx, ls.dir, pid, spec); err != nil {
			return nil, withLog(fmt.Errorf("create docker sandbox: %w", err))
		}
	}
	inst = newInstance(e, ls.id, containerID, ls.dir, ls.token, pid)
	if err := inst.waitHealthy(ctx, startTimeout, waitRes); err != nil {
		return nil, withLog(fmt.Errorf("create docker sandbox: %w", err))
	}
	if acfg.SocketMode != 0 {
		// Under gVisor the agent can't verify its socket's mode (runsc
		// neither stats nor chmods a host socket it created): the host
		// side makes sure.
		if err := os.Chmod(filepath.Join(run, socketFile), acfg.SocketMode); err != nil {
			return nil, fmt.Errorf("create docker sandbox: the agent's socket: %w", err)
		}
	}
	return inst, nil
}

func containerConfig(ls launchSpec) *container.Config {
	spec := ls.spec
	labels := map[string]string{
		labelCreatedBy: createdBy,
		labelID:        ls.id,
		labelName:      spec.Name,
		labelCreatedAt: ls.createdAt.UTC().Format(time.RFC3339Nano),
		labelEndAt:     ls.endAt.UTC().Format(time.RFC3339),
		labelEnv:       ls.build.Name,
		labelEnvBuild:  ls.build.ID,
		labelNetwork:   ls.network,
		labelPids:      strconv.FormatInt(ls.pids, 10),
	}
	if m := spec.Memory(); m > 0 {
		labels[labelMemory] = strconv.FormatInt(m, 10)
	}
	if spec.Isolation == isolationGVisor {
		labels[labelIsolation] = isolationGVisor
	}
	if spec.CPUs > 0 {
		labels[labelCPUs] = strconv.FormatFloat(spec.CPUs, 'g', -1, 64)
	}
	for k, v := range spec.Tags {
		labels[labelTagPrefix+k] = v
	}
	return &container.Config{
		Image:    ls.image,
		Hostname: "sandbox",
		// Root only until the agent has opened its socket; it then becomes
		// uid 1000 for good (see runAgent).
		User:       "0:0",
		Entrypoint: []string{agentInContainer},
		Cmd:        []string{},
		Env:        []string{roleEnv + "=" + roleAgent},
		WorkingDir: "/",
		Labels:     labels,
		// The agent ignores SIGTERM (user code could send it one); stopping
		// the container means killing it.
		StopSignal: "SIGKILL",
	}
}

func hostConfig(ls launchSpec) *container.HostConfig {
	spec := ls.spec
	noInit := false
	pids := ls.pids
	// The agent needs to change its ids, nothing else; and SETPCAP to empty
	// its capability bounding set first (the engine puts the granted
	// capabilities there, and a uid change leaves that set as it is). A
	// caller that isn't root owns run/, which the agent (container root
	// without CAP_DAC_OVERRIDE) could then neither read config.json in nor
	// create its socket in: it gets DAC_OVERRIDE too, until it drops to uid
	// 1000 (which clears every capability).
	capAdd := []string{"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"}
	if os.Geteuid() != 0 {
		capAdd = append(capAdd, "CAP_DAC_OVERRIDE")
	}
	tmpfs := func(size int64, mode string, user bool) string {
		o := fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,nr_inodes=%d,mode=%s", size, isolate.TmpfsInodes(size), mode)
		if user {
			// The host ids the contract's user maps to (its user
			// namespace shows them as 1000:100).
			uid, gid := ls.hostUID, ls.hostUID
			if uid == 0 { // gVisor: the contract's ids
				uid, gid = sandboxUID, sandboxGID
			}
			o += fmt.Sprintf(",uid=%d,gid=%d", uid, gid)
		}
		return o
	}
	hc := &container.HostConfig{
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: ls.agentPath, Target: agentInContainer, ReadOnly: true},
			{Type: mount.TypeBind, Source: filepath.Join(ls.dir, runSubdir), Target: runInContainer},
		},
		Tmpfs: map[string]string{
			"/tmp":       tmpfs(isolate.TmpfsSize(tmpSize, spec.Memory()), "1777", false),
			"/home/user": tmpfs(isolate.TmpfsSize(homeSize, spec.Memory()), "0755", true),
			"/files":     tmpfs(isolate.TmpfsSize(filesSize, spec.Memory()), "0755", true),
			// Our own /dev/shm (the engine then mounts none): its size is
			// the engine's default, 64 MiB, and it gets an inode bound,
			// which the engine's has not (empty files cost kernel memory).
			"/dev/shm": fmt.Sprintf("rw,nosuid,nodev,noexec,size=%d,nr_inodes=%d,mode=1777", shmSize, isolate.TmpfsInodes(shmSize)),
		},
		NetworkMode:    ls.mode,
		AutoRemove:     true,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		CapAdd:         capAdd,
		IpcMode:        "private",
		// Its own cgroup namespace, as a local sandbox: without one (the
		// engine's default on cgroup v1) /proc/self/cgroup shows the host's
		// hierarchy and the engine's full container id.
		CgroupnsMode: container.CgroupnsModePrivate,
		Init:         &noInit, // our agent is PID 1, whatever the engine's default
		Runtime:      ls.opts.Runtime,
		Resources: container.Resources{
			PidsLimit: &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: noFile, Hard: noFile},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
	}
	if ls.seed != "" {
		// The environment's home, which the agent copies into the home
		// tmpfs as the sandbox's user before any user code runs.
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: ls.seed, Target: homeseed.Dir, ReadOnly: true,
			BindOptions: &mount.BindOptions{NonRecursive: true}})
	}
	// Volumes: each host directory bound read-write (not recursively: a
	// mount below the source stays out), the engine resolving the target
	// inside the container's root.
	for _, v := range spec.Volumes {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: v.Source, Target: v.Path,
			BindOptions: &mount.BindOptions{NonRecursive: true, Propagation: mount.PropagationRPrivate}})
	}
	if ls.hostUID != 0 {
		// The agent gives the sandbox a user namespace of its own (uid
		// 1000 inside = the sandbox's host uid) with a pid namespace and
		// a /proc of its own (agentmain.go): the engine's default seccomp
		// profile refuses clone(CLONE_NEWUSER) and mount to a container
		// without CAP_SYS_ADMIN, and its AppArmor profile refuses mount.
		// The agent loads the local variant's seccomp filter on itself
		// before any user code runs (it refuses namespaces, mount, ptrace,
		// io_uring…: more than the engine's profile), and masks /proc as
		// the engine would (the engine's masks would make the kernel
		// refuse a new proc mount).
		hc.SecurityOpt = []string{"no-new-privileges", "seccomp=unconfined", "apparmor=unconfined"}
		hc.MaskedPaths, hc.ReadonlyPaths = sysMaskedPaths, []string{}
	} else {
		// gVisor: the engine's profiles as they are (runsc applies what it
		// can in its own kernel), and no namespaces of ours inside.
		hc.SecurityOpt = []string{"no-new-privileges"}
	}
	if ls.network != "none" {
		// The resolver of the user-space stack (network.go).
		hc.DNS = []netip.Addr{netip.MustParseAddr(isolate.TUNGatewayIPv4)}
		// The engine turns IPv6 off in a container without an IPv6
		// network; the stack serves IPv6 as well as IPv4 (tun0, attached
		// later, takes the default setting).
		hc.Sysctls = map[string]string{"net.ipv6.conf.all.disable_ipv6": "0", "net.ipv6.conf.default.disable_ipv6": "0"}
	}
	if m := spec.Memory(); m > 0 {
		hc.Memory = m
		hc.MemorySwap = m // no swap beyond the limit
	}
	if spec.CPUs > 0 {
		hc.NanoCPUs = int64(spec.CPUs * 1e9)
	}
	return hc
}

// Connect implements driver.Variant.
func (v Variant) Connect(ctx context.Context, id string, spec driver.Spec) (driver.Instance, error) {
	eng, err := connect(ctx, spec)
	if err != nil {
		return nil, err
	}
	inst, err := eng.connectTo(ctx, id)
	if err != nil {
		eng.Close()
		return nil, err
	}
	return inst, nil
}

func (e *engine) connectTo(ctx context.Context, id string) (*instance, error) {
	notFound := fmt.Errorf("sandbox %s: %w (it expired or was killed)", id, sberr.ErrNotFound)
	if !idRE.MatchString(id) {
		return nil, notFound
	}
	cs, err := e.ours(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if c.State != container.StateRunning {
			continue
		}
		dir := runDirOf(c.Mounts)
		r, err := readRecord(dir)
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: reading its record in %s: %w", id, dir, err)
		}
		ictx, cancel := context.WithTimeout(ctx, apiTimeout)
		insp, err := e.c.ContainerInspect(ictx, c.ID, mobyclient.ContainerInspectOptions{})
		cancel()
		if err != nil || insp.Container.State == nil || !insp.Container.State.Running {
			return nil, notFound
		}
		inst := newInstance(e, id, c.ID, dir, r.Token, insp.Container.State.Pid)
		if err := inst.waitHealthy(ctx, 5*time.Second, mobyclient.ContainerWaitResult{}); err != nil {
			return nil, err
		}
		return inst, nil
	}
	return nil, notFound
}

// List implements driver.Variant; it also sweeps expired sandboxes and
// debris.
func (v Variant) List(ctx context.Context, spec driver.Spec, f driver.Filter) ([]driver.Info, error) {
	eng, err := connect(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	cs, err := eng.ours(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []driver.Info
	alive, _ := eng.sweep(ctx, runtimeDir(), cs, false)
	for _, c := range alive {
		r, _ := readRecord(runDirOf(c.Mounts))
		if i := infoOf(c.Labels, string(c.State), time.Unix(c.Created, 0), r); f.Match(i) {
			out = append(out, i)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Sweep implements driver.Sweeper.
func (v Variant) Sweep(ctx context.Context, spec driver.Spec) (int, error) {
	eng, err := connect(ctx, spec)
	if err != nil {
		return 0, err
	}
	defer eng.Close()
	cs, err := eng.ours(ctx, "")
	if err != nil {
		return 0, err
	}
	_, n := eng.sweep(ctx, runtimeDir(), cs, true)
	return n, nil
}

// Kill implements driver.Variant.
func (v Variant) Kill(ctx context.Context, spec driver.Spec, id string) error {
	eng, err := connect(ctx, spec)
	if err != nil {
		return err
	}
	defer eng.Close()
	notFound := fmt.Errorf("sandbox %s: %w (it expired or was killed)", id, sberr.ErrNotFound)
	if !idRE.MatchString(id) {
		return notFound
	}
	cs, err := eng.ours(ctx, id)
	if err != nil {
		return err
	}
	if len(cs) == 0 {
		_ = removeSandboxDir(filepath.Join(runtimeDir(), id), id)
		return notFound
	}
	for _, c := range cs {
		if err := eng.removeContainer(ctx, c.ID); err != nil {
			return err
		}
		_ = removeSandboxDir(runDirOf(c.Mounts), id)
	}
	return nil
}

// endOf is when a sandbox ends: the record's end (SetTimeout moves it) when
// there is a record, else the label's.
func endOf(labels map[string]string, r *record) time.Time {
	if r != nil && !r.EndAt.IsZero() {
		return r.EndAt
	}
	t, _ := time.Parse(time.RFC3339, labels[labelEndAt])
	return t
}

func infoOf(labels map[string]string, state string, created time.Time, r *record) driver.Info {
	status := "running"
	if state != string(container.StateRunning) {
		status = "stopped"
	}
	if t, err := time.Parse(time.RFC3339Nano, labels[labelCreatedAt]); err == nil {
		created = t
	}
	var tags map[string]string
	for k, v := range labels {
		if tk, ok := strings.CutPrefix(k, labelTagPrefix); ok {
			if tags == nil {
				tags = map[string]string{}
			}
			tags[tk] = v
		}
	}
	mem, _ := strconv.ParseInt(labels[labelMemory], 10, 64)
	cpus, _ := strconv.ParseFloat(labels[labelCPUs], 64)
	return driver.Info{ID: labels[labelID], Variant: "docker", Name: labels[labelName], Tags: tags, Status: status,
		CreatedAt: created, EndAt: endOf(labels, r), Memory: mem, CPUs: cpus, Network: labels[labelNetwork],
		Environment: labels[labelEnv], BuildID: labels[labelEnvBuild], Isolation: labels[labelIsolation]}
}

// sweep removes containers past their end (plus grace) or no longer
// running, and sandbox directories in rt whose container is gone; it
// returns the running, unexpired containers. With remove false it only
// sorts (List: a read has no side effects); n counts the dead removed. The agents end themselves at
// their lifetime; this is the backstop for a wedged agent, an engine that
// missed an AutoRemove, or a host that crashed.
func (e *engine) sweep(ctx context.Context, rt string, cs []container.Summary, remove bool) (alive []container.Summary, n int) {
	now := time.Now()
	known := map[string]bool{}
	for _, c := range cs {
		id := c.Labels[labelID]
		known[id] = true
		dir := runDirOf(c.Mounts)
		r, _ := readRecord(dir)
		end := endOf(c.Labels, r)
		young := now.Sub(time.Unix(c.Created, 0)) < createGrace
		switch {
		case c.State == container.StateRunning && (end.IsZero() || now.Before(end.Add(sweepGrace))):
			alive = append(alive, c)
		case c.State == container.StateRemoving, c.State == container.StateCreated && young:
			// Going away on its own, or being created right now.
		default:
			if !remove {
				continue
			}
			if err := e.removeContainer(ctx, c.ID); err == nil {
				_ = removeSandboxDir(dir, id)
				n++
			}
		}
	}
	if !remove {
		return alive, 0
	}
	ents, _ := os.ReadDir(rt)
	for _, ent := range ents {
		id := ent.Name()
		if !ent.IsDir() || !idRE.MatchString(id) || known[id] {
			continue
		}
		dir := filepath.Join(rt, id)
		r, err := readRecord(dir)
		if err == nil && r.Engine != e.host {
			continue // a sandbox on another engine: not ours to judge
		}
		// No container: debris once its end has passed, or once it is too
		// old to be a Create in progress.
		ended := err == nil && !r.EndAt.IsZero() && now.After(r.EndAt)
		if st, err := os.Stat(dir); err == nil && (ended || now.Sub(st.ModTime()) > createGrace) {
			_ = removeSandboxDir(dir, id)
			n++
		}
	}
	return alive, n
}

// sysMaskedPaths are the engine's masks outside /proc, which it still
// applies to a sandbox with a host uid of its own (ctragent masks its own
// /proc: the engine's masks there would make the kernel refuse the mount).
var sysMaskedPaths = []string{"/sys/firmware", "/sys/devices/virtual/powercap"}
