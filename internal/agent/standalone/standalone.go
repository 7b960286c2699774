// Package standalone is the in-sandbox agent as a program of its own, for
// launchers that start it themselves (pods, containers, tests): it serves
// E2B's envd and code-interpreter protocols on one listener. The
// code-sandboxes-agent command is a thin wrapper around Main, and so is the
// public package's "pod-agent" role, so that an image can carry either
// binary as its agent.
//
//	code-sandboxes-agent --listen unix:/run/agent.sock --token-file /run/token
//	code-sandboxes-agent --sandbox --listen tcp:127.0.0.1:49983 --lifetime 1h --id k123
package standalone

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/code-sandboxes/code-sandboxes/internal/agent"
	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/sandboxenv"
)

// Environment variables the launcher may hand the agent. Both are removed
// from the process environment before anything else can see them.
const (
	// TokenEnv holds the access token (X-Access-Token) when --token-file
	// is not given.
	TokenEnv = "CODE_SANDBOXES_TOKEN"
	// EnvEnv holds, in --sandbox mode, a JSON object of the sandbox's own
	// environment variables (Config.Env): they travel beside the token (a
	// Secret on kubernetes), not in the pod's spec.
	EnvEnv = "CODE_SANDBOXES_ENV"
)

// sandboxNoFile is RLIMIT_NOFILE in --sandbox mode (the local and docker
// variants' 4096).
const sandboxNoFile = 4096

// maxEnvJSON bounds EnvEnv: the launcher is trusted, but a bound costs
// nothing and keeps a mistake from eating the sandbox's memory.
const maxEnvJSON = 1 << 20

// Main runs the agent with the given arguments (without the program name)
// and returns the process's exit status.
func Main(args []string) int {
	fs := flag.NewFlagSet("code-sandboxes-agent", flag.ContinueOnError)
	listen := fs.String("listen", "tcp:127.0.0.1:49983", "where to listen: unix:PATH or tcp:HOST:PORT")
	tokenFile := fs.String("token-file", "", "file holding the access token (X-Access-Token); empty = $"+TokenEnv+", else no token (refused with --sandbox)")
	workdir := fs.String("workdir", "", "default working directory (default $HOME or /home/user)")
	python := fs.String("python", "", "python interpreter for kernels (default python3 from PATH)")
	lifetime := fs.Duration("lifetime", 0, "exit after this long (0 = never); POST /x/timeout restarts the countdown")
	idleTimeout := fs.Duration("idle-timeout", 0, "exit after this long without use (0 = never); a request in flight is use")
	id := fs.String("id", "", "sandbox id reported by /x/info")
	sandbox := fs.Bool("sandbox", false, "run as a sandbox's init: close /proc/self to user code (PR_SET_DUMPABLE 0), require a token, start /home/user as a copy of "+homeseed.Dir+" where the image has it, "+
		"rebuild the environment from the sandbox contract, the image's variables and $"+EnvEnv+" (JSON), and, as PID 1, ignore signals and reap orphans")
	prewarm := fs.Bool("prewarm", false, "start the default python kernel before the first request")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if *sandbox {
		// First, before the token is read: once user code runs (as our
		// uid), /proc/<our pid>/{environ,mem,fd} must be closed to it, or
		// it could read the token from our initial environment.
		if err := notDumpable(); err != nil {
			return fail(err)
		}
	}
	agent.SingleThreaded()

	token := os.Getenv(TokenEnv)
	os.Unsetenv(TokenEnv)
	if *tokenFile != "" {
		b, err := readBounded(*tokenFile, 4096)
		if err != nil {
			return fail(err)
		}
		token = strings.TrimSpace(string(b))
	}
	if *sandbox && token == "" {
		// Fail closed: a sandbox's agent without a token would serve
		// anyone who can reach its port.
		return fail(fmt.Errorf("--sandbox needs an access token ($%s or --token-file)", TokenEnv))
	}
	var userEnv map[string]string
	if *sandbox {
		var err error
		if userEnv, err = sandboxEnvironment(); err != nil {
			return fail(err)
		}
	}
	if *workdir == "" {
		*workdir = os.Getenv("HOME")
		if *workdir == "" {
			*workdir = "/home/user"
		}
	}
	if *sandbox {
		// An environment's image carries its /home/user at homeseed.Dir
		// (environment.Image): the pod's home, a tmpfs of its own, starts
		// as a copy of it, as the other variants' do. Images without one
		// (exported before, or not ours) seed nothing.
		if err := seedHomeDir(); err != nil {
			return fail(err)
		}
	}
	if *sandbox {
		// A working directory below the (writable) home may not exist yet
		// in a fresh sandbox; best effort, the kernel reports a bad cwd.
		_ = os.MkdirAll(*workdir, 0o755)
	}
	network, addr, ok := strings.Cut(*listen, ":")
	if !ok || (network != "unix" && network != "tcp") {
		return fail(fmt.Errorf("--listen %q: use unix:PATH or tcp:HOST:PORT", *listen))
	}
	if network == "unix" {
		_ = os.Remove(addr)
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return fail(err)
	}
	if network == "unix" {
		_ = os.Chmod(addr, 0o600)
	}
	if host, port, err := net.SplitHostPort(addr); *sandbox && network == "tcp" && err == nil && host == "127.0.0.1" {
		// The same port on IPv6's loopback too, before user code runs:
		// a port-forward dials "localhost", and the runtime (containerd)
		// falls back to [::1] when 127.0.0.1 does not answer; a listener
		// of user code there would get the host's connections and their
		// access token (the hostile suite's AgentPortHijack). Without IPv6
		// in the pod there is nothing to hold.
		if ln6, err := net.Listen("tcp6", net.JoinHostPort("::1", port)); err == nil {
			ln = newMultiListener(ln, ln6)
		}
	}
	if *sandbox {
		// The local variant's seccomp filter on every thread, stacked on
		// whatever the runtime installed (a pod's RuntimeDefault differs
		// per runtime and version: io_uring, vsock...), before any user
		// code runs; every process the agent starts inherits it. Fail
		// closed: no sandbox without it.
		if err := isolate.LoadSeccompAllThreads(); err != nil {
			return fail(fmt.Errorf("seccomp: %w", err))
		}
		// No core dumps, hard (user code holds no CAP_SYS_RESOURCE to
		// raise it back), as the other variants: where the node's
		// core_pattern is a pipe, the kernel hands a crashing process's
		// memory to a helper running as the node's root, whatever the
		// soft limit (the hostile suite's CoreDumps: pods got an unlimited
		// hard limit from the runtime).
		if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{}); err != nil {
			return fail(fmt.Errorf("setrlimit(RLIMIT_CORE, 0): %w", err))
		}
		// Descriptors bounded as on the other variants (4096, or lower if
		// that is what we were given): the runtime's default let user code
		// hold 20,000 (the hostile suite's FileDescriptors).
		var nofile syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
			return fail(fmt.Errorf("getrlimit(RLIMIT_NOFILE): %w", err))
		}
		if nofile.Max > sandboxNoFile {
			nofile.Max = sandboxNoFile
		}
		nofile.Cur = nofile.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
			return fail(fmt.Errorf("setrlimit(RLIMIT_NOFILE, %d): %w", nofile.Max, err))
		}
	}
	ctx := context.Background()
	if *sandbox && os.Getpid() == 1 {
		// As a pid namespace's init, user code (our uid) can signal us
		// with anything but SIGKILL/SIGSTOP; a signal Go handles by dying
		// would end the sandbox from inside. The launcher ends the sandbox
		// from outside (SIGKILL), the lifetime from within.
		ignoreSignals()
		go agent.ReapOrphans()
	} else {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
		defer stop()
	}
	home := os.Getenv("HOME")
	envdOpts := agent.EnvdOptions{Workdir: *workdir, Home: home}
	if *sandbox {
		envdOpts = agent.EnvdOptions{DefaultUser: "user", Home: "/home/user", Workdir: *workdir, Env: userEnv, Contract: true}
	}
	routes, closeEnvd := agent.EnvdRoutes(envdOpts)
	srv := agent.New(agent.Config{
		ID: *id, AccessToken: token, Python: *python, Workdir: *workdir, Env: userEnv, Lifetime: *lifetime, IdleTimeout: *idleTimeout,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Routes: routes, OnClose: closeEnvd, Prewarm: *prewarm,
	})
	fmt.Fprintf(os.Stderr, "code-sandboxes-agent %s listening on %s\n", agent.Version, *listen)
	if err := srv.Serve(ctx, ln); err != nil {
		return fail(err)
	}
	return 0
}

// sandboxEnvironment replaces the process environment with the sandbox's
// and returns the variables the sandbox's user asked for (EnvEnv): the
// image's own variables stay (a custom image's PATH, VIRTUAL_ENV …), the
// launcher's (ours, and what Kubernetes injects about the cluster's API
// service) go, the sandbox contract fills what is missing, and the user's
// variables win. Kernels and commands inherit the result.
func sandboxEnvironment() (map[string]string, error) {
	var user map[string]string
	if raw := os.Getenv(EnvEnv); raw != "" {
		if len(raw) > maxEnvJSON {
			return nil, fmt.Errorf("$%s is larger than %d bytes", EnvEnv, maxEnvJSON)
		}
		if err := json.Unmarshal([]byte(raw), &user); err != nil {
			return nil, fmt.Errorf("$%s: %w", EnvEnv, err)
		}
	}
	merged := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || launcherVariable(k) {
			continue
		}
		merged[k] = v
	}
	for k, v := range user {
		merged[k] = v
	}
	env := sandboxenv.Env(merged)
	os.Clearenv()
	for k, v := range env {
		if err := os.Setenv(k, v); err != nil {
			return nil, fmt.Errorf("setting %s: %w", k, err)
		}
	}
	return env, nil
}

// launcherVariable reports whether an inherited variable belongs to the
// launcher rather than the image: ours (token, role, env), the API
// service's address that the kubelet injects into every container, and the
// runtime's HOSTNAME (other variants don't set it either).
func launcherVariable(k string) bool {
	return strings.HasPrefix(k, "CODE_SANDBOXES_") || strings.HasPrefix(k, "KUBERNETES_") || k == "HOSTNAME"
}

func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, nil
}

// ignoreSignals drains every catchable signal (see Main).
func ignoreSignals() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP,
		syscall.SIGABRT, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGTERM, syscall.SIGSYS,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGVTALRM, syscall.SIGPROF,
		syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}, osSignals...)...)
	go func() {
		for range sigs { //nolint:revive // drained on purpose: each signal is ignored
			continue
		}
	}()
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "code-sandboxes-agent:", err)
	return 1
}

// multiListener accepts from several listeners (the agent's port on both
// loopbacks).
type multiListener struct {
	lns   []net.Listener
	conns chan net.Conn
	errc  chan error
	done  chan struct{}
	once  sync.Once
}

func newMultiListener(lns ...net.Listener) *multiListener {
	m := &multiListener{lns: lns, conns: make(chan net.Conn), errc: make(chan error, len(lns)), done: make(chan struct{})}
	for _, l := range lns {
		go func(l net.Listener) {
			for {
				c, err := l.Accept()
				if err != nil {
					m.errc <- err
					return
				}
				select {
				case m.conns <- c:
				case <-m.done:
					c.Close()
					return
				}
			}
		}(l)
	}
	return m
}

func (m *multiListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case err := <-m.errc:
		return nil, err
	case <-m.done:
		return nil, net.ErrClosed
	}
}

func (m *multiListener) Close() error {
	var err error
	m.once.Do(func() {
		close(m.done)
		for _, l := range m.lns {
			if e := l.Close(); err == nil {
				err = e
			}
		}
	})
	return err
}

func (m *multiListener) Addr() net.Addr { return m.lns[0].Addr() }
