//go:build linux

package local

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"syscall"

	"github.com/code-sandboxes/code-sandboxes/internal/agent"
	"github.com/code-sandboxes/code-sandboxes/internal/cpupin"
	"github.com/code-sandboxes/code-sandboxes/internal/earlystart"
	"github.com/code-sandboxes/code-sandboxes/internal/envd"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/kernel"
	"github.com/code-sandboxes/code-sandboxes/internal/sandboxenv"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// runAgent is the sandbox's init: finish isolating ourselves, then serve.
func runAgent() int {
	trace.Mark("sandbox init: inits done")
	if os.Getenv(earlystart.KernelEnv) != "0" {
		// In stage 1 (this same function, before the re-exec): start the
		// default kernel there (earlystart.Start). cmd/code-sandboxes-init,
		// when the caller found it, runs stage 1 the same way.
		isolate.SetEarlyStart(earlystart.Start)
	}
	ready, err := isolate.ChildAsync()
	if err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: isolation failed:", err)
		return 1
	}
	// /proc/1/{mem,environ,fd} closed to user code (same uid): without it
	// user code could read the token and rewrite the agent, so a failure
	// ends the sandbox rather than serving weaker.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: prctl(PR_SET_DUMPABLE, 0):", errno)
		return 1
	}
	trace.Seal()
	trace.Mark("agent: isolated")
	lnFile := os.NewFile(3, "listener")
	cfgFile := os.NewFile(earlystart.ConfigFD, "config")
	var cfg agentConfig
	if err := json.NewDecoder(io.LimitReader(cfgFile, earlystart.MaxConfig)).Decode(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: reading config:", err)
		return 1
	}
	cfgFile.Close()
	// The agent and its waiting kernel on one CPU (see cpupin): before the
	// kernel's hello, which tells it the CPU.
	if _, err := cpupin.Pin(cfg.ID); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent:", err) // slower, not less safe
	}
	early, es := earlystart.Adopt()
	// A root user (root callers' sandboxes; isolate's rootuser.go puts sudo
	// in /usr/local/bin): the SDK's user: 'root' runs through sudo.
	var root agent.EnvdOptions
	if isolate.RootAvailable() {
		root.Sudo = isolate.SudoPath
		root.Root = envd.User{Name: "root", UID: isolate.RootOuterUID, GID: isolate.RootOuterGID, Home: isolate.RootHome}
		root.OpenAs = isolate.RootOpen
	}
	trace.Mark("agent: config read")
	ln, err := net.FileListener(lnFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: listener:", err)
		return 1
	}
	lnFile.Close()
	// The process environment of kernels and commands is built from scratch:
	// nothing of the host's leaks in.
	os.Clearenv()
	env := sandboxenv.Env(cfg.Env)
	for k, v := range env {
		os.Setenv(k, v)
	}
	if cfg.KernelBytecodeFD > 2 && es.Bytecode {
		// Stage 1 installed it.
		syscall.Close(cfg.KernelBytecodeFD)
	} else if cfg.KernelBytecodeFD > 2 {
		// Before the first kernel starts: it imports this instead of
		// compiling its source. Best effort, as it's only an optimisation;
		// the fd (a host file) is closed before anything runs here.
		f := os.NewFile(uintptr(cfg.KernelBytecodeFD), "kernel bytecode")
		tag, pyc, err := earlystart.ParseBytecode(f)
		f.Close()
		if err == nil {
			_ = kernel.InstallBytecode("", tag, pyc)
		}
		trace.Mark("agent: kernel bytecode installed")
	}
	go agent.ReapOrphans()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	trace.Mark("agent: environment set")
	routes, closeEnvd := agent.EnvdRoutes(agent.EnvdOptions{DefaultUser: "user", Workdir: cfg.Workdir, Env: cfg.Env, Contract: true, Sudo: root.Sudo, Root: root.Root, OpenAs: root.OpenAs})
	trace.Mark("agent: routes made")
	srv := agent.New(agent.Config{
		ID: cfg.ID, AccessToken: cfg.Token, Python: cfg.Python, Workdir: cfg.Workdir,
		Env: cfg.Env, Lifetime: cfg.Lifetime, IdleTimeout: cfg.IdleTimeout, Logger: logger,
		Routes: routes, OnClose: closeEnvd, Prewarm: !cfg.NoPrewarm,
		EarlyKernel: early, ToolsSocket: es.Tools,
		// The root broker (isolate.ChildAsync holds it) starts on the
		// first request for root, which releases it and waits for it.
	})
	trace.Mark("agent: server made")
	if !cfg.NoPrewarm {
		// The kernel's start (python's, tens of ms) is the longest step
		// left: begin it now, before the sandbox reports ready and the
		// caller's first request. Everything the
		// kernel must not inherit is closed or close-on-exec by now (the
		// listener's and config's fds, the bytecode's, the status and
		// broker pipes, the trace file).
		srv.StartPrewarm(context.Background())
		if early == nil {
			// One P (SingleThreaded): let the prewarm's goroutine run up
			// to the kernel's fork and exec now, not when this one next
			// blocks. (An adopted kernel is running already: its session
			// only sends the hello, which the kernel reads once it has
			// started, long after this.)
			runtime.Gosched()
		}
		trace.Mark("agent: kernel start begun")
	}
	// After the kernel's start, which it would only delay (creating its
	// spare threads takes ms on a busy host), and before anything the
	// sandbox's user runs: no request is answered before Serve.
	agent.SingleThreaded()
	if err := ready(); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent:", err)
		return 1
	}
	trace.Mark("agent: reported ready")
	agent.IgnoreSignals()
	trace.Mark("agent: serving")
	ctx := context.Background()
	if err := srv.Serve(ctx, ln); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent:", err)
		return 1
	}
	return 0
}
