//go:build linux

package ctragent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"

	"github.com/code-sandboxes/code-sandboxes/internal/agent"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/records"
	"golang.org/x/sys/unix"
)

// A docker sandbox (runc) has a host uid of its own (Config.HostUID, from
// records.DockerUIDs): without one, code in every docker sandbox would run
// as host uid 1000, one uid shared by every docker sandbox and by the
// host's own uid-1000 user (per-uid kernel limits and accounting, files left
// in shared places, signals across sandboxes). The engine offers only a
// daemon-wide user namespace (userns-remap), the same for every container.
// So the container's init (Run) starts the agent proper (RunInner) in a
// user namespace of the sandbox's own, which maps the contract's uid 1000
// and gid 100 to the sandbox's host uid and nothing else (no uid 0 inside),
// with pid and mount namespaces of its own; the init then becomes that host
// uid itself, with no capability, and waits: the container ends when the
// agent does. gVisor sandboxes (HostUID 0) keep the single-process path:
// their uids are gVisor's own.

// innerCaps are what the agent proper needs before it drops everything:
// mount (its /proc), empty its bounding set and groups. They are
// capabilities in its own user namespace only, which owns nothing but the
// pid and mount namespaces made with it.
var innerCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP, unix.CAP_SETGID}

// runOuter is Run's path for a sandbox with a host uid of its own.
func runOuter(name string, ln *net.UnixListener, cfg Config) int {
	if !records.DockerUIDs.Contains(cfg.HostUID) {
		return fail(name, "the config's host uid %d is not one of the docker variant's range", cfg.HostUID)
	}
	inner, cfgw, err := startInner(ln, cfg.HostUID)
	if err != nil {
		return fail(name, "starting the agent in the sandbox's user namespace: %v", err)
	}
	abort := func(format string, a ...any) int {
		cfgw.Close()
		_ = inner.Process.Kill()
		_ = inner.Wait()
		return fail(name, format, a...)
	}
	// Nothing of ours runs as host root any more: the sandbox's own host
	// uid, no capability, not dumpable, our seccomp filter. (User code
	// can't reach us anyway: we are outside its pid namespace.) All of it
	// before the agent has its config: it serves nothing, so no user code
	// runs, while we are still host root (the agent reads the config before
	// it accepts a connection).
	if err := DropPrivilegesTo(cfg.HostUID, cfg.HostUID); err != nil {
		return abort("dropping privileges: %v", err)
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return abort("prctl(PR_SET_DUMPABLE, 0): %v", errno)
	}
	if err := isolate.LoadSeccompAllThreads(); err != nil {
		return abort("installing the seccomp filter: %v", err)
	}
	err = json.NewEncoder(cfgw).Encode(cfg)
	if cerr := cfgw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return abort("handing the agent its config: %v", err)
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
		return fail(name, "the agent ended: %v", err)
	default:
		return fail(name, "waiting for the agent: %v", err)
	}
}

// startInner starts this binary again as the agent proper (InnerRole) in
// new user, pid and mount namespaces, as the contract's user (uid 1000 gid
// 100 inside = the sandbox's host uid outside), handing it the listener
// (fd 3) and returning the pipe (its fd 4) that the caller writes its
// config to: not the environment, which user code could read.
func startInner(ln *net.UnixListener, hostUID int) (*exec.Cmd, *os.File, error) {
	lf, err := ln.File()
	if err != nil {
		return nil, nil, err
	}
	defer lf.Close()
	// Our copy must not unlink the socket the agent serves on.
	ln.SetUnlinkOnClose(false)
	ln.Close()
	cr, cw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer cr.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"code-sandboxes-agent"}
	cmd.Env = []string{"CODE_SANDBOXES_ROLE=" + InnerRole}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{lf, cr}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: sandboxUID, HostID: hostUID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: sandboxGID, HostID: hostUID, Size: 1}},
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
	if err := isolate.StartOwnedBy(cmd, hostUID); err != nil {
		cw.Close()
		return nil, nil, err
	}
	return cmd, cw, nil
}

// RunInner is the agent proper of a sandbox with a host uid of its own: PID
// 1 of the sandbox's pid namespace, uid 1000 in its user namespace, with the
// capabilities of innerCaps there until it has mounted its /proc; then it
// drops everything, loads the seccomp filter and serves (as Run does).
func RunInner(name string) int {
	if os.Getpid() != 1 {
		return fail(name, "this role runs only as the init of the sandbox's pid namespace; it is started by the container's agent")
	}
	cfgFile := os.NewFile(4, "config")
	var cfg Config
	err := json.NewDecoder(io.LimitReader(cfgFile, 1<<20)).Decode(&cfg)
	cfgFile.Close()
	if err != nil {
		return fail(name, "reading the config: %v", err)
	}
	lnFile := os.NewFile(3, "listener")
	ln, err := net.FileListener(lnFile)
	lnFile.Close()
	if err != nil {
		return fail(name, "listener: %v", err)
	}
	if err := mountProc(); err != nil {
		return fail(name, "mounting the sandbox's /proc: %v", err)
	}
	return serve(name, ln, cfg, nil, 0)
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
