// Starting a sandbox's container: the launch spec, the container and host
// configuration it becomes, and waiting for the agent.

package docker

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
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
	"github.com/code-sandboxes/code-sandboxes/internal/records"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

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

// sysMaskedPaths are the engine's masks outside /proc, which it still
// applies to a sandbox with a host uid of its own (ctragent masks its own
// /proc: the engine's masks there would make the kernel refuse the mount).
var sysMaskedPaths = []string{"/sys/firmware", "/sys/devices/virtual/powercap"}
