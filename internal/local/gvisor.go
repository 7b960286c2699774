package local

// Isolation level "gvisor": the sandbox's agent is the workload of a gVisor
// sandbox (runsc, the OCI runtime), so that the sandbox's code talks to
// gVisor's user-space kernel (the Sentry) instead of the host's.
//
// What stays the same as under namespaces: the shim supervises, the record
// and the socket live in the sandbox's directory, the rootfs choices (the
// host's system directories or an environment's root, read-only), the
// contract (uid 1000/gid 100, /home/user, /tmp, /files), the limits (the
// cgroup runsc puts the whole gVisor sandbox in) and the network: none is
// runsc's --network=none (loopback inside the Sentry only); all and
// allowlist put the sandbox in a network namespace of its own whose only
// way out is tun0, read by our egress stack in the shim as under
// namespaces, with runsc's --network=host so that gVisor uses that
// namespace (see SECURITY.md: network calls then reach the host kernel's
// network stack of that namespace).
//
// The channel: the agent (internal/ctragent, the docker variant's container
// init) creates its socket in a root-owned directory bound in from the host
// (runsc --host-uds=create makes it a real host socket), so the host
// reaches it as it reaches a namespaces sandbox's socket, by path; code in
// the sandbox, uid 1000, can neither enter that directory nor replace the
// socket.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/code-sandboxes/code-sandboxes/internal/ctragent"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/egress"
	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

const (
	// IsolationGVisor is the isolation level Spec.Isolation names.
	IsolationGVisor = "gvisor"
	// roleGVisorAgent is the agent's role inside a gVisor sandbox.
	roleGVisorAgent = "gvisor-agent"
	// runscEnv overrides where runsc is (default: runsc on PATH).
	runscEnv = "CODE_SANDBOXES_RUNSC"
	// gvisorDir is the gVisor sandbox's part of the sandbox directory: the
	// OCI bundle, runsc's state and the agent's run directory.
	gvisorDir = "gvisor"
	// agentInGVisor is where the agent binary is bound inside, and
	// runInGVisor its run directory (config and socket; root's, 0700).
	// Not under /run: the sandbox has no /run, as under namespaces.
	agentInGVisor = "/.code-sandboxes-agent"
	runInGVisor   = "/.code-sandboxes-run"
	// gvisorPidsOverhead is added to the pids limit of the cgroup runsc
	// puts the whole sandbox in: it counts gVisor's own threads (the
	// Sentry's, the gofer's) besides the sandbox's tasks.
	gvisorPidsOverhead = 128
	// gvisorAgentUID is the agent's own uid inside a gVisor sandbox (its
	// saved uid; ctragent/owncreds.go): its pause directory and the
	// kernels' protocol pipes are that uid's, out of the sandbox user's
	// reach.
	gvisorAgentUID = ctragent.GVisorAgentUID
)

// findRunsc returns the runsc binary to use.
func findRunsc() (string, error) {
	if p := os.Getenv(runscEnv); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return "", fmt.Errorf("%w: %s=%s is not a runsc binary", sberr.ErrNotSupported, runscEnv, p)
		}
		return p, nil
	}
	p, err := exec.LookPath("runsc")
	if err != nil {
		return "", fmt.Errorf("%w: isolation gvisor needs gVisor's runsc on PATH (Debian/Ubuntu: apt-get install runsc; or set %s to its path)", sberr.ErrNotSupported, runscEnv)
	}
	return p, nil
}

// checkGVisor refuses isolation gvisor where it can't be given, with the
// reason, and returns the runsc to use.
func checkGVisor() (string, error) {
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%w: isolation gvisor on the local variant needs root (runsc creates the sandbox's namespaces and cgroup as root); run as root, or use isolation namespaces", sberr.ErrNotSupported)
	}
	return findRunsc()
}

// gvisorSandbox is a running gVisor sandbox, as the shim supervises it.
type gvisorSandbox struct {
	runsc, root, id string
	// flags are runsc's global flags, the same on every command (runsc
	// reads its configuration from them each time).
	flags []string
	// pid is gVisor's sandbox process (the Sentry) and start its start
	// time, so that a reused pid is never taken for it.
	pid      int
	start    uint64
	tun      *os.File
	cgroups  []string
	waitCmd  *exec.Cmd
	waitOnce sync.Once
	waitErr  error
	// pause is set by a successful checkpoint (pause.go).
	pause pauseState
}

// runscCmd is one runsc command on this sandbox's state directory.
func (g *gvisorSandbox) runscCmd(args ...string) *exec.Cmd {
	a := append([]string{"--root", g.root}, g.flags...)
	cmd := exec.Command(g.runsc, append(a, args...)...)
	// runsc's own environment: nothing of ours (the shim spec) goes in.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	return cmd
}

// startGVisor writes the OCI bundle and starts the gVisor sandbox; it
// returns once the agent runs (not necessarily serving yet).
// beforeStart runs between runsc create and start, with the host end of
// tun0 (network all and allowlist; nil otherwise).
func startGVisor(spec shimSpec, logf *os.File, beforeStart func(tun *os.File) error) (_ *gvisorSandbox, err error) {
	r := spec.Record
	g, bundle, err := prepareGVisor(spec)
	if err != nil {
		return nil, err
	}
	base := filepath.Join(spec.Dir, gvisorDir)
	pidFile := filepath.Join(base, "pid")
	create := g.runscCmd("create", "--bundle", bundle, "--pid-file", pidFile, g.id)
	// The agent's output (its stdio is runsc create's) goes to agent.log.
	create.Stdout, create.Stderr = logf, logf
	if err := create.Run(); err != nil {
		return nil, fmt.Errorf("runsc create: %w ", err)
	}
	defer func() {
		if err != nil {
			g.destroy()
		}
	}()
	if g.pid, err = readPidFile(pidFile, "runsc create"); err != nil {
		return nil, err
	}
	g.start = procStart(g.pid)
	if r.Network != "none" {
		// Before start: the agent must never see a network without our
		// stack behind it.
		if g.tun, err = isolate.AttachTUN(g.pid); err != nil {
			return nil, fmt.Errorf("attach the sandbox's network: %w", err)
		}
	}
	g.cgroups = gvisorCgroups(g.pid)
	if err := beforeStart(g.tun); err != nil {
		return nil, err
	}
	g.tun = nil // beforeStart owns it now
	start := g.runscCmd("start", g.id)
	start.Stdout, start.Stderr = logf, logf
	if err := start.Run(); err != nil {
		return nil, fmt.Errorf("runsc start: %w ", err)
	}
	g.waitCmd = g.runscCmd("wait", g.id)
	if err := g.waitCmd.Start(); err != nil {
		return nil, fmt.Errorf("runsc wait: %w", err)
	}
	return g, nil
}

// prepareGVisor writes the sandbox's OCI bundle and the agent's run
// directory; it returns the sandbox to create (or restore) and its bundle.
func prepareGVisor(spec shimSpec) (_ *gvisorSandbox, bundle string, err error) {
	r := spec.Record
	base := filepath.Join(spec.Dir, gvisorDir)
	bundle = filepath.Join(base, "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	run := filepath.Join(base, "run")
	etc := filepath.Join(base, "etc")
	for _, d := range []string{base, bundle, rootfs, run, etc, filepath.Join(base, "state")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, "", err
		}
	}
	// The root and the files bound into it must be readable by the
	// sandbox's user; run stays 0700 root (the agent's socket and config).
	for _, d := range []string{base, bundle, rootfs, etc} {
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, "", err
		}
	}
	// The agent's socket directory: the agent's own uid's (the agent, no
	// longer root, opens its socket there again after a restore, as that
	// uid: ctragent/owncreds.go) and group root's (the agent first binds
	// it as uid 0 without CAP_DAC_OVERRIDE). run above it is root's and
	// only searchable by others (0711): the agent, no longer root, walks
	// through it; the sandbox user can't list it nor enter ctl.
	ctl := filepath.Join(run, ctragent.CtlDir)
	if err := os.Mkdir(ctl, 0o770); err != nil {
		return nil, "", err
	}
	if err := os.Chown(ctl, gvisorAgentUID, 0); err != nil {
		return nil, "", err
	}
	if err := os.Chmod(run, 0o711); err != nil {
		return nil, "", err
	}
	if err := os.Chmod(ctl, 0o770); err != nil {
		return nil, "", err
	}
	g := &gvisorSandbox{runsc: spec.Runsc, root: filepath.Join(base, "state"), id: "cs-" + dirName(r.ID)[:24]}

	seed := ""
	if spec.Rootfs != "" {
		// (On a restore too: runsc restores only onto the same mounts.)
		if seed, err = homeseed.RootfsHome(spec.Rootfs); err != nil {
			return nil, "", err
		}
	}
	if seed != "" && !spec.Restore {
		// The agent copies the home and would fail the same way, but
		// after this supervisor reported the sandbox started: refused
		// here, the caller gets the reason.
		home := spec.Home
		if home <= 0 {
			home = isolate.TmpfsSize(isolate.DefaultHomeSize, r.Memory)
		}
		if err := homeseed.Check(seed, homeseed.Limits{Bytes: home, Inodes: isolate.TmpfsInodes(home), Hint: isolate.HomeHint}); err != nil {
			return nil, "", err
		}
	}
	acfg := ctragent.Config{Base: spec.Agent.Base,
		// The host side is root: code in the sandbox can't even connect.
		SocketMode: 0o600, Pausable: true, AgentUID: gvisorAgentUID, SeedHome: seed != ""}
	b, _ := json.Marshal(acfg)
	if err := os.WriteFile(filepath.Join(run, ctragent.ConfigFile), b, 0o600); err != nil {
		return nil, "", err
	}
	oci, err := gvisorSpec(spec, rootfs, run, etc, seed)
	if err != nil {
		return nil, "", err
	}
	b, err = json.MarshalIndent(oci, "", " ")
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		return nil, "", err
	}

	network := "none"
	if r.Network != "none" {
		network = "host" // in the namespace of its own that tun0 is attached to
	}
	g.flags = []string{"--network=" + network, "--host-uds=create"}
	return g, bundle, nil
}

// runGVisorShim is runShim for isolation gvisor.
func runGVisorShim(spec shimSpec, report func(shimReport), fail func(error) int) int {
	dir := spec.Dir
	r := spec.Record
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	var netw *egress.Stack
	start := startGVisor
	if spec.Restore {
		start = restoreGVisor
	}
	if spec.Restore && spec.Image == "" {
		lock, err := lockResume(dir)
		if err != nil {
			return fail(err)
		}
		defer lock.Close()
	}
	if stopRequested() {
		return fail(errGaveUp)
	}
	g, err := start(spec, logf, func(tun *os.File) error {
		if tun == nil {
			return nil
		}
		runtime.GOMAXPROCS(2) // the network stack works on packets while the sandbox talks
		var err error
		netw, err = startNetwork(dir, &r, tun)
		return err
	})
	if err != nil {
		if netw != nil {
			netw.Close()
		}
		if log := tail(filepath.Join(dir, "agent.log"), 2048); log != "" {
			err = fmt.Errorf("%w; runsc said: %s", err, log)
		}
		return fail(err)
	}
	if netw != nil {
		defer netw.Close()
	}
	stallForTest(g.pid)
	// The host reaches the agent where a namespaces sandbox's socket is.
	if err := os.Symlink(filepath.Join(gvisorDir, "run", ctragent.CtlDir, ctragent.SocketFile), filepath.Join(dir, socketFile)); err != nil && !spec.Restore {
		_ = g.Kill()
		_ = g.Cleanup()
		return fail(err)
	}
	if !spec.Restore || spec.Image != "" {
		// What a snapshot of this sandbox needs to fork it (snapshot.go).
		keep := spec
		keep.Restore, keep.Image = false, ""
		b, _ := json.Marshal(keep)
		_ = os.WriteFile(filepath.Join(dir, gvisorDir, specFile), b, 0o600)
	}
	r.ShimPid = os.Getpid()
	r.ShimStart = procStart(os.Getpid())
	r.AgentPid = g.pid
	r.Cgroups = g.cgroups
	if r.Paused {
		// The lifetime clock ran only while the sandbox did.
		r.Paused, r.EndAt, r.Remaining = false, time.Now().Add(r.Remaining), 0
	}
	if err := writeRecord(dir, &r); err != nil {
		_ = g.Kill()
		_ = g.Cleanup()
		return fail(err)
	}
	// Before the report: a pause asked for as soon as Create or Resume
	// returns must not find SIGUSR2 unheard (the Go runtime drops it, and
	// the caller waited its whole pause bound for nothing).
	listenShimSignals()
	report(shimReport{OK: true, AgentPid: g.pid})
	return supervise(dir, g, netw, nil, func() { logf.Close() })
}

// gvisorSpec is the OCI runtime spec of the sandbox: the agent as uid 0
// with only the capabilities to become the sandbox user (ctragent drops
// them), no_new_privs, a read-only root built from the same entries as
// under namespaces, the contract's tmpfs mounts and the limits.
func gvisorSpec(spec shimSpec, rootfs, run, etc, seed string) (*specs.Spec, error) {
	r := spec.Record
	hostname := "sandbox"
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			"user:x:1000:100:user:/home/user:/bin/bash\n" +
			"code-sandboxes-agent:x:999:65534::/nonexistent:/usr/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group":    "root:x:0:\nusers:x:100:user\nnogroup:x:65534:\n",
		"hostname": hostname + "\n",
		"hosts":    "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
	if r.Network != "none" {
		files["resolv.conf"] = "nameserver " + isolate.TUNGatewayIPv4 + "\nnameserver " + isolate.TUNGatewayIPv6 + "\n"
	}
	var mounts []specs.Mount
	bindRO := func(src, dst string) {
		mounts = append(mounts, specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	// The root's entries: the host's system directories, or every
	// top-level entry of the environment's rootfs but the contract's own.
	src := spec.Rootfs
	var names []string
	if src == "" {
		src = "/"
		names = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"}
	} else {
		ents, err := os.ReadDir(src)
		if err != nil {
			return nil, fmt.Errorf("rootfs %s: %w", src, err)
		}
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	reserved := map[string]bool{"proc": true, "dev": true, "sys": true, "tmp": true, "home": true, "files": true, runInGVisor[1:]: true, agentInGVisor[1:]: true, homeseed.Dir[1:]: true}
	for _, name := range names {
		if reserved[name] {
			continue
		}
		p := filepath.Join(src, name)
		st, err := os.Lstat(p)
		if err != nil {
			continue // absent on this host (lib32, libx32)
		}
		dst := filepath.Join(rootfs, name)
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			// Merged /usr: /bin -> usr/bin resolves inside the root.
			t, err := os.Readlink(p)
			if err != nil {
				return nil, err
			}
			if err := os.Symlink(t, dst); err != nil {
				return nil, err
			}
			continue
		case st.IsDir():
			if err := os.Mkdir(dst, 0o755); err != nil {
				return nil, err
			}
		case st.Mode().IsRegular():
			if err := os.WriteFile(dst, nil, 0o644); err != nil {
				return nil, err
			}
		default:
			continue
		}
		bindRO(p, "/"+name)
	}
	// The contract's /etc files over the root's, where it has them.
	for name, content := range files {
		if _, err := os.Stat(filepath.Join(src, "etc", name)); err != nil {
			continue
		}
		f := filepath.Join(etc, name)
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			return nil, err
		}
		bindRO(f, "/etc/"+name)
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp", "home", "files", runInGVisor[1:]} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, agentInGVisor), nil, 0o755); err != nil {
		return nil, err
	}
	mounts = append([]specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}, mounts...)
	tmpfs := func(dst string, size int64, mode string, owner bool) {
		o := []string{"nosuid", "nodev", "mode=" + mode, "size=" + strconv.FormatInt(size, 10)}
		if owner {
			o = append(o, fmt.Sprintf("uid=%d", isolate.SandboxUID), fmt.Sprintf("gid=%d", isolate.SandboxGID))
		}
		mounts = append(mounts, specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: o})
	}
	size := func(v, def int64) int64 {
		if v > 0 {
			return v
		}
		return isolate.TmpfsSize(def, r.Memory)
	}
	tmpfs("/tmp", size(spec.TmpSize, isolate.DefaultTmpSize), "1777", false)
	tmpfs("/dev/shm", 64<<20, "1777", false) // as under namespaces
	tmpfs("/home/user", size(spec.Home, isolate.DefaultHomeSize), "755", true)
	tmpfs("/files", isolate.TmpfsSize(isolate.DefaultFilesSize, r.Memory), "755", true)
	mounts = append(mounts,
		specs.Mount{Destination: runInGVisor, Type: "bind", Source: run, Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}},
		specs.Mount{Destination: agentInGVisor, Type: "bind", Source: spec.Exe, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	if seed != "" {
		// The environment's home, which the agent copies into the home
		// tmpfs as the sandbox's user before any user code runs.
		if err := os.Mkdir(filepath.Join(rootfs, homeseed.Dir), 0o755); err != nil {
			return nil, err
		}
		mounts = append(mounts, specs.Mount{Destination: homeseed.Dir, Type: "bind", Source: seed, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}})
	}

	// An empty bounding set from the start (nothing can be gained through
	// exec); the agent uses SETUID and SETGID once, to become the user.
	caps := []string{"CAP_SETUID", "CAP_SETGID"}
	nofile := uint64(isolate.DefaultNoFile)
	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: hostname,
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Process: &specs.Process{
			User:            specs.User{UID: 0, GID: 0},
			Args:            []string{agentInGVisor},
			Env:             []string{roleEnv + "=" + roleGVisorAgent},
			Cwd:             "/",
			Capabilities:    &specs.LinuxCapabilities{Bounding: []string{}, Effective: caps, Permitted: caps},
			NoNewPrivileges: true,
			// RLIMIT_CORE 0, hard, as namespaces (isolate) and docker
			// set it: no core dumps, and code can't raise it.
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}, {Type: "RLIMIT_CORE", Hard: 0, Soft: 0}},
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.NetworkNamespace}},
			CgroupsPath: "/code-sandboxes/" + "gvisor-" + dirName(r.ID)[:24],
			Resources:   &specs.LinuxResources{},
		},
	}
	if r.Memory > 0 {
		m := r.Memory
		s.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &m, Swap: &m}
	}
	if r.CPUs > 0 {
		period := uint64(100000)
		quota := int64(r.CPUs * float64(period))
		s.Linux.Resources.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	if r.Pids > 0 {
		s.Linux.Resources.Pids = &specs.LinuxPids{Limit: r.Pids + gvisorPidsOverhead}
	}
	return s, nil
}

// gvisorCgroups are the cgroup directories runsc put the sandbox in (for
// Usage and for the cleanup of a dead supervisor).
func gvisorCgroups(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !strings.Contains(f[2], "/code-sandboxes/gvisor-") {
			continue
		}
		ctl := f[1]
		if ctl == "" {
			out = append(out, filepath.Join("/sys/fs/cgroup", f[2])) // v2
			continue
		}
		for _, c := range strings.Split(ctl, ",") {
			if c == "memory" || c == "cpu" || c == "cpuacct" || c == "pids" {
				out = append(out, filepath.Join("/sys/fs/cgroup", ctl, f[2]))
				break
			}
		}
	}
	return out
}

// Wait waits for the sandbox to end.
func (g *gvisorSandbox) Wait() (isolate.ExitInfo, error) {
	g.waitOnce.Do(func() { g.waitErr = g.waitCmd.Wait() })
	return isolate.ExitInfo{}, nil
}

// Kill ends every process of the sandbox (runsc kill --all); it does not wait.
func (g *gvisorSandbox) Kill() error {
	out, err := g.runscBounded(runscShortWait, nil, "kill", "--all", g.id, "KILL")
	if err != nil && !bytes.Contains(out, []byte("not running")) {
		// A wedged sandbox: its Sentry process is ours to end.
		_ = syscall.Kill(g.pid, syscall.SIGKILL)
		return fmt.Errorf("runsc kill: %w: %s", err, bytes.TrimSpace(out))
	}
	// runsc can report success and leave the sandbox running: a fork
	// killed just after its restore ran on, and its supervisor's runsc
	// wait with it (TestLocalGVisorGivenUpForkEndsIt). The Sentry is ours
	// to end if it has not ended by itself soon.
	go endSentry(g.pid, g.start)
	return nil
}

// Cleanup removes what runsc keeps for the sandbox (its state, cgroup and
// gofer).
func (g *gvisorSandbox) Cleanup() error { g.destroy(); return nil }

func (g *gvisorSandbox) destroy() {
	if g.tun != nil {
		g.tun.Close()
	}
	_, _ = g.runscBounded(runscShortWait, nil, "delete", "--force", g.id)
	endSentry(g.pid, g.start)
}

// How long destroy waits for the Sentry to end after runsc delete, and
// again after killing it itself.
var (
	sentryDeleteWait = 3 * time.Second
	sentryKillWait   = 5 * time.Second
)

// endSentry returns once gVisor's sandbox process, pid started at start,
// has ended (bounded). runsc delete signals the Sentry but does not wait
// for it, and the supervisor removes the sandbox's directory right after
// destroy: without this wait a directory gone would not mean the sandbox
// is gone (CI saw a Sentry outlive its directory). A Sentry still there
// after the wait (runsc delete failed or hung) is killed here: it is ours,
// checked by its start time against a reused pid. pid 0: nothing to wait for.
func endSentry(pid int, start uint64) {
	if pid <= 0 || start == 0 {
		return
	}
	if waitEnded(pid, start, time.Now().Add(sentryDeleteWait)) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	waitEnded(pid, start, time.Now().Add(sentryKillWait))
}

// cleanupGVisor is cleanupStale's part for a gVisor sandbox whose
// supervisor died: runsc deletes what it can find in the state directory.
func cleanupGVisor(ctx context.Context, dir string, r *record) {
	// The runsc found now, not the record's path: a record is data, never
	// a program to run as root.
	runsc, err := findRunsc()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	root := filepath.Join(dir, gvisorDir, "state")
	// The Sentry as it is now: the record's pid, only if that process is
	// gVisor's sandbox on this very state directory (a paused sandbox's
	// record keeps a pid long gone, which another sandbox's Sentry may
	// have been given since: that one is never waited for or killed).
	var sentry int
	var start uint64
	if isSentryOf(r.AgentPid, root) {
		sentry, start = r.AgentPid, procStart(r.AgentPid)
	}
	cmd := exec.CommandContext(ctx, runsc, "--root", root, "delete", "--force", "cs-"+dirName(r.ID)[:24])
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	_ = cmd.Run()
	endSentry(sentry, start)
}

// isSentryOf reports whether pid is gVisor's sandbox process (runsc boot,
// named runsc-sandbox) started on the state directory root.
func isSentryOf(pid int, root string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	// runsc passes its global flags on to the sandbox it boots.
	return args[0] == "runsc-sandbox" && slices.Contains(args[1:], "--root="+root)
}

// isolationOf validates Spec.Isolation for the local variant.
func isolationOf(spec driver.Spec) (string, error) {
	switch spec.Isolation {
	case "", "namespaces":
		return "", nil
	case IsolationGVisor:
		return IsolationGVisor, nil
	}
	return "", fmt.Errorf("%w: unknown isolation %q; use namespaces or gvisor", sberr.ErrInvalidConfig, spec.Isolation)
}

// readPidFile reads the sandbox's pid that runsc (what: the command, for
// the error) wrote to path.
func readPidFile(path, what string) (int, error) {
	pb, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pb)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: bad pid file %q", what, pb)
	}
	return pid, nil
}
