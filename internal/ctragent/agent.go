//go:build linux

// Package ctragent is our agent as the init of an OCI container: the
// docker variant's containers and the local variant's gVisor sandboxes
// (runsc) run it. It starts as uid 0 with only the capabilities to change
// its ids, reads its config from a root-owned run directory, opens its
// socket there and becomes the sandbox user for good before any user code
// runs.
package ctragent

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
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/agent"
	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/sandboxenv"
)

// The sandbox contract's user (DESIGN §4).
const (
	sandboxUID = 1000
	sandboxGID = 100
)

func fail(name, format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "code-sandboxes "+name+": "+format+"\n", a...)
	return 1
}

// Run is the container's init (name says which in messages; runDir is
// where its config and socket are). It starts as uid 0 with only the
// capabilities to change its ids (the container drops every other one and
// sets no_new_privs), takes its config and opens its socket while it still
// owns the root-owned run directory, then becomes the sandbox user for good
// before any user code can run.
func Run(name, runDir string) int {
	// The role is only meaningful as a container's init: refuse to drop
	// privileges or open sockets anywhere else (a leaked env var on a host).
	if os.Getpid() != 1 {
		return fail(name, "this role runs only as a container's init (PID 1); it is started by the docker variant or by the local variant under gVisor")
	}
	cfgPath := filepath.Join(runDir, ConfigFile)
	cfg, err := readConfig(cfgPath)
	if err != nil {
		return fail(name, "reading %s: %v", cfgPath, err)
	}
	// The token must not stay readable once user code runs.
	if err := os.Remove(cfgPath); err != nil {
		return fail(name, "removing %s: %v", cfgPath, err)
	}
	sockDir := runDir
	var q *pauseCtl
	if cfg.Pausable {
		if q, err = openPauseCtl(runDir); err != nil {
			return fail(name, "%v", err)
		}
		sockDir = q.dir
	}
	sock := filepath.Join(sockDir, SocketFile)
	_ = os.Remove(sock)
	// The token is the authentication; the mode keeps user code from even
	// connecting where the host allows (see SocketMode). The directory stays
	// root-owned, so user code can't unlink or replace the socket. The mode
	// comes from the umask at bind: gVisor refuses chmod on a socket it
	// created on the host (runsc --host-uds=create).
	mode := cfg.SocketMode.Perm()
	if mode == 0 {
		mode = 0o666
	}
	old := syscall.Umask(int(^mode & 0o777))
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		return fail(name, "listen on %s: %v", sock, err)
	}
	if st, serr := os.Stat(sock); serr != nil || st.Mode().Perm() != mode {
		// gVisor (runsc --host-uds=create) can neither stat nor chmod a
		// host socket it created: the umask above gave it its mode, and
		// the host side sees to it (the docker variant chmods it; the
		// local variant's run directory is root's alone).
		err := os.Chmod(sock, mode)
		gvisorHostSocket := serr != nil && errors.Is(err, syscall.EPERM)
		if err != nil && !gvisorHostSocket && !privateDir(runDir) {
			return fail(name, "chmod %s: %v", sock, err)
		}
	}
	if cfg.HostUID != 0 {
		return runOuter(name, ln.(*net.UnixListener), cfg)
	}
	return serve(name, ln, cfg, q, mode)
}

// serve drops to the sandbox user for good, then serves: the agent of a
// container without a host uid of its own (Run), or the agent proper in the
// sandbox's user namespace (RunInner). q (nil unless cfg.Pausable) and mode
// are for closing and reopening the socket around a checkpoint.
func serve(name string, ln net.Listener, cfg Config, q *pauseCtl, mode os.FileMode) int {
	saved := sandboxUID
	if cfg.AgentUID != 0 {
		if cfg.AgentUID == sandboxUID || cfg.AgentUID < 0 || cfg.AgentUID > 65533 {
			return fail(name, "agent uid %d: it must be a uid of its own", cfg.AgentUID)
		}
		saved = cfg.AgentUID
	}
	if err := dropPrivilegesTo(sandboxUID, sandboxGID, saved); err != nil {
		return fail(name, "dropping privileges: %v", err)
	}
	if cfg.SeedHome {
		// As the sandbox's user: the copy can write nothing the user
		// couldn't, and everything in the home is the user's.
		if err := homeseed.FromDir(homeseed.Dir, "/home/user", homeseed.Limits{}); err != nil {
			return fail(name, "%v", err)
		}
	}
	var protocolPipe func() (*os.File, *os.File, error)
	if cfg.AgentUID != 0 {
		q.setOwner(cfg.AgentUID)
		protocolPipe = func() (r, w *os.File, err error) {
			err = asUID(cfg.AgentUID, func() error { r, w, err = os.Pipe(); return err })
			return r, w, err
		}
	}
	// /proc/1/{mem,environ,fd} closed to user code, which runs as our uid.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fail(name, "prctl(PR_SET_DUMPABLE, 0): %v", errno)
	}
	// The local variant's seccomp filter on top of the engine's profile,
	// before any user code runs: the engine's default depends on its
	// version, and Docker before 25 allows io_uring (a steady source of
	// kernel exploits) and the whole i386 syscall table on x86-64; the
	// hostile suite found io_uring_setup allowed on Docker 20.10. Every
	// process user code starts inherits both filters.
	if err := isolate.LoadSeccompAllThreads(); err != nil {
		return fail(name, "installing the seccomp filter: %v", err)
	}
	agent.SingleThreaded()
	agent.IgnoreSignals()
	// The process environment of kernels and commands is built from scratch:
	// nothing of the container's (or the engine's) leaks in.
	os.Clearenv()
	for k, v := range sandboxenv.Env(cfg.Env) {
		os.Setenv(k, v)
	}
	// Our stdin is the runtime's (under gVisor a host descriptor, which
	// code in the sandbox could open again through /proc/1/fd/0): this
	// sandbox's own /dev/null instead.
	if f, err := os.Open(os.DevNull); err == nil {
		_ = unix.Dup2(int(f.Fd()), 0)
		f.Close()
	}
	if err := os.Chdir("/"); err != nil {
		return fail(name, "chdir /: %v", err)
	}
	go agent.ReapOrphans()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	routes, closeEnvd := agent.EnvdRoutes(agent.EnvdOptions{DefaultUser: "user", Workdir: cfg.Workdir, Env: cfg.Env, Contract: true})
	srv := agent.New(agent.Config{
		ID: cfg.ID, AccessToken: cfg.Token, Python: cfg.Python, Workdir: cfg.Workdir,
		Env: cfg.Env, Lifetime: cfg.Lifetime, IdleTimeout: cfg.IdleTimeout, Logger: logger,
		Routes: routes, OnClose: closeEnvd, Prewarm: !cfg.NoPrewarm,
		Quiesce: q.quiesce(mode), ProtocolPipe: protocolPipe,
	})
	// Returning ends the container (we are its init), which the engine then
	// removes (AutoRemove): that is how the lifetime ends a sandbox.
	if err := srv.Serve(context.Background(), ln); err != nil {
		return fail(name, "%v", err)
	}
	return 0
}

// privateDir: dir is root's and closed to everyone else, so what is in it
// (the socket whose mode could not be set) is out of user code's reach.
func privateDir(dir string) bool {
	st, err := os.Stat(dir)
	if err != nil {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && st.IsDir() && sys.Uid == 0 && st.Mode().Perm()&0o077 == 0
}

func readConfig(path string) (Config, error) {
	var cfg Config
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
func DropPrivileges() error { return DropPrivilegesTo(sandboxUID, sandboxGID) }

// DropPrivilegesTo is DropPrivileges to uid and gid (the outer init of a
// sandbox with a host uid of its own becomes that uid).
func DropPrivilegesTo(uid, gid int) error { return dropPrivilegesTo(uid, gid, uid) }

// dropPrivilegesTo is DropPrivilegesTo with saved as the saved uid (the
// agent's own uid under gVisor, owncreds.go; uid otherwise).
func dropPrivilegesTo(uid, gid, saved int) error {
	if err := dropBoundingSet(); err != nil {
		return err
	}
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("setgroups([]): %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid(%d): %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, saved); err != nil {
		return fmt.Errorf("setresuid(%d, %d, %d): %w", uid, uid, saved, err)
	}
	// Verify rather than trust: a half-done drop must not serve user code.
	var ru, eu, su uint32
	if _, _, e := syscall.RawSyscall(syscall.SYS_GETRESUID, uintptr(unsafe.Pointer(&ru)), uintptr(unsafe.Pointer(&eu)), uintptr(unsafe.Pointer(&su))); e != 0 {
		return fmt.Errorf("getresuid: %w", e)
	}
	if int(ru) != uid || int(eu) != uid || int(su) != saved || syscall.Getgid() != gid || syscall.Getegid() != gid {
		return fmt.Errorf("ids after the drop: uids %d %d %d gid %d egid %d", ru, eu, su, syscall.Getgid(), syscall.Getegid())
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
	// (With cgo every-thread syscalls are refused: then the runtime must
	// have given no inheritable capability, which the check below verifies.)
	if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 && errno != syscall.ENOTSUP {
		return fmt.Errorf("capset(0): %w", errno)
	}
	// Every thread, every set: empty.
	return checkNoCapabilities()
}

// dropBoundingSet empties the capability bounding set of every thread; it
// needs CAP_SETPCAP, which the container grants for this alone (the uid
// change clears it right after). A runtime that starts us with an empty
// bounding set already (the local variant's gVisor sandboxes) needs
// nothing: then a binary built with cgo, which can't change every thread's
// set, may be the agent too.
func dropBoundingSet() error {
	if boundingSetEmpty() {
		return nil
	}
	for c := 0; c <= isolate.LastCap(); c++ {
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

// boundingSetEmpty: every thread's capability bounding set is empty.
func boundingSetEmpty() bool {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err != nil {
			return false
		}
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
				var caps uint64
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &caps); err != nil || caps != 0 {
					return false
				}
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
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
		// CapAmb is missing where there are no ambient capabilities at
		// all (gVisor; kernels before 4.3): the other four must be there.
		if n < 4 {
			return fmt.Errorf("thread %s: %d of the five capability sets found in its status", task.Name(), n)
		}
	}
	return nil
}
