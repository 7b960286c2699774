package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/code-sandboxes/code-sandboxes/internal/agent"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/records"
	"golang.org/x/sys/unix"
)

// The re-executed binary's role, chosen by roleEnv (the variable the local
// variant's roles use too; the values differ).
const (
	roleEnv   = "CODE_SANDBOXES_ROLE"
	roleAgent = "docker-agent"
	roleInner = "docker-agent-inner"
)

// Paths inside the container.
const (
	agentInContainer = "/usr/local/libexec/code-sandboxes-agent"
	runInContainer   = "/run/code-sandboxes"
	configFile       = "config.json"
	socketFile       = "agent.sock"
)

// The sandbox contract's user (DESIGN §4).
const (
	sandboxUID = 1000
	sandboxGID = 100
)

// agentConfig is what the host hands the agent, in run/config.json (the
// same fields as the local variant's; not the environment, which user code
// could read in /proc/1/environ).
type agentConfig struct {
	ID       string            `json:"id"`
	Token    string            `json:"token"`
	Python   string            `json:"python"`
	Workdir  string            `json:"workdir"`
	Env      map[string]string `json:"env"`
	Lifetime time.Duration     `json:"lifetime"`
	// IdleTimeout ends the sandbox after this long unused (0 = never).
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// NoPrewarm leaves the default kernel to start on first use.
	NoPrewarm bool `json:"no_prewarm,omitempty"`
	// HostUID is the sandbox's own host uid (and gid), from
	// records.DockerUIDs: the contract's uid 1000 and gid 100 map to it.
	HostUID int `json:"host_uid"`
	// SocketMode is the agent socket's mode: 0600 when the host side is
	// root (who connects whatever the owner), so code in the sandbox can't
	// even connect; 0 = 0666, for callers that aren't root (the token is
	// then the only gate, as it always is for everything but /health).
	SocketMode os.FileMode `json:"socket_mode,omitempty"`
}

// Main runs the container agent when this process was started as one (the
// env var roleEnv says so) and exits; it returns normally otherwise. The
// public package calls it from init, so any static binary that imports it
// can be a docker sandbox's init.
func Main() {
	switch os.Getenv(roleEnv) {
	case roleAgent:
		os.Exit(runAgent())
	case roleInner:
		os.Exit(runInner())
	case roleNetwork:
		os.Exit(runNetwork())
	}
}

func agentFail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "code-sandboxes docker agent: "+format+"\n", a...)
	return 1
}

// runAgent is the container's init. It starts as host uid 0 with only the
// capabilities to change ids (the container drops every other one and sets
// no_new_privs), takes its config and opens its socket while it still owns
// the root-owned run directory, then starts the agent proper (runInner) in
// a user namespace of the sandbox's own, which maps the contract's uid 1000
// and gid 100 to the sandbox's host uid and nothing else (no uid 0 inside),
// with pid and mount namespaces of its own. It then becomes the sandbox's
// host uid itself, with no capability, and waits: the container ends when
// the agent does.
//
// Why a namespace of our own: without one, code in every docker sandbox
// runs as host uid 1000, one uid shared by every docker sandbox and by the
// host's own uid-1000 user (per-uid kernel limits and accounting, files left
// in shared places, signals across sandboxes on the same host). The engine
// offers only a daemon-wide user namespace (userns-remap), the same for
// every container.
func runAgent() int {
	// The role is only meaningful as a container's init: refuse to drop
	// privileges or open sockets anywhere else (a leaked env var on a host).
	if os.Getpid() != 1 {
		return agentFail("this role runs only as a container's init (PID 1); it is started by the docker variant")
	}
	cfgPath := filepath.Join(runInContainer, configFile)
	cfg, err := readAgentConfig(cfgPath)
	if err != nil {
		return agentFail("reading %s: %v", cfgPath, err)
	}
	// The token must not stay readable once user code runs.
	if err := os.Remove(cfgPath); err != nil {
		return agentFail("removing %s: %v", cfgPath, err)
	}
	if !records.DockerUIDs.Contains(cfg.HostUID) {
		return agentFail("the config's host uid %d is not one of the docker variant's range", cfg.HostUID)
	}
	sock := filepath.Join(runInContainer, socketFile)
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return agentFail("listen on %s: %v", sock, err)
	}
	// The token is the authentication; the mode keeps user code from even
	// connecting where the host allows (see SocketMode). The directory stays
	// root-owned, so user code can't unlink or replace the socket.
	mode := cfg.SocketMode.Perm()
	if mode == 0 {
		mode = 0o666
	}
	if err := os.Chmod(sock, mode); err != nil {
		return agentFail("chmod %s: %v", sock, err)
	}
	inner, err := startInner(ln.(*net.UnixListener), cfg)
	if err != nil {
		return agentFail("starting the agent in the sandbox's user namespace: %v", err)
	}
	// Nothing of ours runs as host root any more: the sandbox's own host uid,
	// no capability, not dumpable, our seccomp filter. (User code can't
	// reach us anyway: we are outside its pid namespace.)
	if err := dropPrivileges(cfg.HostUID, cfg.HostUID); err != nil {
		_ = inner.Process.Kill()
		return agentFail("dropping privileges: %v", err)
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		_ = inner.Process.Kill()
		return agentFail("prctl(PR_SET_DUMPABLE, 0): %v", errno)
	}
	if err := isolate.LoadSeccompAllThreads(); err != nil {
		_ = inner.Process.Kill()
		return agentFail("installing the seccomp filter: %v", err)
	}
	agent.IgnoreSignals()
	err = inner.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ee.ExitCode() >= 0 {
			return ee.ExitCode()
		}
		return agentFail("the agent ended: %v", err)
	default:
		return agentFail("waiting for the agent: %v", err)
	}
}

// innerCaps are what the agent proper needs before it drops everything:
// mount (its /proc) and empty its bounding set and groups. They are
// capabilities in its own user namespace only, which owns nothing but the
// pid and mount namespaces made with it.
var innerCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP, unix.CAP_SETGID}

// startInner starts this binary again as the agent proper (roleInner) in new
// user, pid and mount namespaces, as the contract's user (uid 1000 gid 100
// inside = the sandbox's host uid outside), handing it the listener (fd 3)
// and its config through a pipe (fd 4: not the environment, which user code
// could read).
func startInner(ln *net.UnixListener, cfg agentConfig) (*exec.Cmd, error) {
	lf, err := ln.File()
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	// Our copy must not unlink the socket the agent serves on.
	ln.SetUnlinkOnClose(false)
	ln.Close()
	cr, cw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer cr.Close()
	cmd := exec.Command(agentInContainer)
	cmd.Args = []string{"code-sandboxes-agent"}
	cmd.Env = []string{roleEnv + "=" + roleInner}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{lf, cr}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: sandboxUID, HostID: cfg.HostUID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: sandboxGID, HostID: cfg.HostUID, Size: 1}},
		// We map as a privileged writer (CAP_SETGID outside): setgroups
		// stays allowed, for the agent to empty its groups.
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: sandboxUID, Gid: sandboxGID, Groups: []uint32{}},
		AmbientCaps:                innerCaps,
		// No Pdeathsig: it follows the thread that started the child,
		// which StartOwnedBy throws away; and when we (the container's
		// init) end, the kernel kills every process of the container's
		// pid namespace, the agent's nested one included.
	}
	// The namespace owned by the sandbox's host uid, not root: per-user
	// counts (inotify instances…) are charged to the owner as well
	// (isolate.StartOwnedBy).
	if err := isolate.StartOwnedBy(cmd, cfg.HostUID); err != nil {
		cw.Close()
		return nil, err
	}
	err = json.NewEncoder(cw).Encode(cfg)
	if cerr := cw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("handing the agent its config: %w", err)
	}
	return cmd, nil
}

// runInner is the agent proper: PID 1 of the sandbox's pid namespace, uid
// 1000 in its user namespace, with the capabilities of innerCaps there
// until it has mounted its /proc; then it drops everything, loads the
// seccomp filter and serves.
func runInner() int {
	if os.Getpid() != 1 {
		return agentFail("this role runs only as the init of the sandbox's pid namespace; it is started by the docker agent")
	}
	cfgFile := os.NewFile(4, "config")
	var cfg agentConfig
	err := json.NewDecoder(io.LimitReader(cfgFile, 1<<20)).Decode(&cfg)
	cfgFile.Close()
	if err != nil {
		return agentFail("reading the config: %v", err)
	}
	lnFile := os.NewFile(3, "listener")
	ln, err := net.FileListener(lnFile)
	lnFile.Close()
	if err != nil {
		return agentFail("listener: %v", err)
	}
	if err := mountProc(); err != nil {
		return agentFail("mounting the sandbox's /proc: %v", err)
	}
	if err := dropPrivileges(sandboxUID, sandboxGID); err != nil {
		return agentFail("dropping privileges: %v", err)
	}
	// /proc/1/{mem,environ,fd} closed to user code, which runs as our uid.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return agentFail("prctl(PR_SET_DUMPABLE, 0): %v", errno)
	}
	// The local variant's seccomp filter, before any user code runs: the
	// engine's profile is off (see hostConfig), and Docker's default before
	// 25 allowed io_uring (a steady source of kernel exploits) and the whole
	// i386 syscall table on x86-64; the hostile suite found io_uring_setup
	// allowed on Docker 20.10. Every process user code starts inherits it.
	if err := isolate.LoadSeccompAllThreads(); err != nil {
		return agentFail("installing the seccomp filter: %v", err)
	}
	agent.SingleThreaded()
	agent.IgnoreSignals()
	// The process environment of kernels and commands is built from scratch:
	// nothing of the container's (or the engine's) leaks in.
	os.Clearenv()
	for k, v := range agent.SandboxEnv(cfg.Env) {
		os.Setenv(k, v)
	}
	if err := os.Chdir("/"); err != nil {
		return agentFail("chdir /: %v", err)
	}
	go agent.ReapOrphans()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	routes, closeEnvd := agent.EnvdRoutes(agent.EnvdOptions{DefaultUser: "user", Workdir: cfg.Workdir, Env: cfg.Env, Contract: true})
	srv := agent.New(agent.Config{
		ID: cfg.ID, AccessToken: cfg.Token, Python: cfg.Python, Workdir: cfg.Workdir,
		Env: cfg.Env, Lifetime: cfg.Lifetime, IdleTimeout: cfg.IdleTimeout, Logger: logger,
		Routes: routes, OnClose: closeEnvd, Prewarm: !cfg.NoPrewarm,
	})
	// Returning ends the container (our parent, its init, follows), which
	// the engine then removes (AutoRemove): that is how the lifetime ends a
	// sandbox.
	if err := srv.Serve(context.Background(), ln); err != nil {
		return agentFail("%v", err)
	}
	return 0
}

// The engine's masks, which it can't apply here (sysMaskedPaths aside): a
// masked /proc is not fully visible, and the kernel refuses a new proc
// mount in a user namespace unless one is. The agent mounts its own /proc
// and masks it the same way (Docker 20.10's defaults): host-wide
// information (/proc/sched_debug lists every host task), kernel memory and
// keys hidden, /proc/sys and the like read-only.
var (
	procMaskedPaths = []string{"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi"}
	procReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	// sysMaskedPaths the engine still masks (they are not in /proc).
	sysMaskedPaths = []string{"/sys/firmware", "/sys/devices/virtual/powercap"}
)

// mountProc gives the sandbox's pid namespace its own /proc, masked.
func mountProc() error {
	// Nothing we mount propagates back to the container's mount namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	const procFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("proc", "/proc", "proc", procFlags, ""); err != nil {
		return fmt.Errorf("mount proc: %w", err)
	}
	for _, p := range procMaskedPaths {
		st, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if st.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|procFlags, "size=0k,nr_inodes=1,mode=0555")
		} else {
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("masking %s: %w", p, err)
		}
	}
	for _, p := range procReadonlyPaths {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|procFlags, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", p, err)
		}
	}
	return nil
}

func readAgentConfig(path string) (agentConfig, error) {
	var cfg agentConfig
	f, err := os.Open(path)
	if err != nil {
		return cfg, err
	}
	defer f.Close()
	if err := json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&cfg); err != nil {
		return cfg, err
	}
	if cfg.Token == "" {
		return cfg, errors.New("no access token")
	}
	return cfg, nil
}

// dropPrivileges makes every thread of the process the sandbox user, with no
// supplementary groups and no capability in any set. Go's syscall.Set* apply
// to all threads (Go ≥ 1.16); moving every uid away from 0 clears the
// permitted and effective capabilities, and no_new_privs keeps them from
// coming back through exec. The bounding set (per thread, which the engine
// fills with the capabilities it grants: SETUID and SETGID here) and the
// inheritable set survive a uid change: they are emptied first, on every
// thread, as the local variant does (hostile suite, Escalation: CapBnd was
// 0xc0). Harmless under no_new_privs, but nothing should be left to rely on.
func dropPrivileges(uid, gid int) error {
	if err := dropBoundingSet(); err != nil {
		return err
	}
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("setgroups([]): %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid(%d): %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid(%d): %w", uid, err)
	}
	// Verify rather than trust: a half-done drop must not serve user code.
	if syscall.Getuid() != uid || syscall.Geteuid() != uid || syscall.Getgid() != gid || syscall.Getegid() != gid {
		return fmt.Errorf("ids after the drop: uid %d euid %d gid %d egid %d", syscall.Getuid(), syscall.Geteuid(), syscall.Getgid(), syscall.Getegid())
	}
	if err := syscall.Setuid(0); err == nil {
		return errors.New("setuid(0) still succeeds after the drop")
	}
	if g, err := syscall.Getgroups(); err != nil || len(g) != 0 {
		return fmt.Errorf("supplementary groups after the drop: %v %v", g, err)
	}
	// The inheritable set survives setuid (older engines filled it, CVE-2022-24769):
	// lowering every set to nothing is always allowed.
	hdr := capHeader{version: linuxCapabilityVersion3}
	var data [2]capData
	if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return fmt.Errorf("capset(0): %w", errno)
	}
	// Every thread, every set: empty.
	return checkNoCapabilities()
}

// capLast is the highest capability the kernel knows (an unknown one fails
// PR_CAPBSET_DROP with EINVAL).
func capLast() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63
	}
	var n int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &n); err != nil || n < 0 || n > 63 {
		return 63
	}
	return n
}

// dropBoundingSet empties the capability bounding set of every thread; it
// needs CAP_SETPCAP, which the container grants for this alone (the uid
// change clears it right after).
func dropBoundingSet() error {
	for c := 0; c <= capLast(); c++ {
		_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, syscall.PR_CAPBSET_DROP, uintptr(c), 0)
		if errno == syscall.EINVAL {
			break // beyond what this kernel knows
		}
		if errno == syscall.ENOTSUP {
			return errors.New("dropping the capability bounding set on every thread needs an agent built without cgo (CGO_ENABLED=0)")
		}
		if errno != 0 {
			return fmt.Errorf("prctl(PR_CAPBSET_DROP, %d): %w", c, errno)
		}
	}
	return nil
}

const linuxCapabilityVersion3 = 0x20080522

type capHeader struct {
	version uint32
	pid     int32
}

type capData struct {
	effective, permitted, inheritable uint32
}

// checkNoCapabilities verifies that every thread has all five capability
// sets empty.
func checkNoCapabilities() error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		f, err := os.Open(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err != nil {
			continue // a thread that just exited
		}
		sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
		n := 0
		for sc.Scan() {
			for _, set := range []string{"CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"} {
				if v, ok := strings.CutPrefix(sc.Text(), set); ok {
					n++
					var caps uint64
					if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &caps); err != nil || caps != 0 {
						f.Close()
						return fmt.Errorf("thread %s: %s %s after the drop (%v)", task.Name(), set, strings.TrimSpace(v), err)
					}
				}
			}
		}
		f.Close()
		if n != 5 {
			return fmt.Errorf("thread %s: %d of the five capability sets found in its status", task.Name(), n)
		}
	}
	return nil
}
