//go:build linux

package local

import (
	"bytes"
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
	"github.com/code-sandboxes/code-sandboxes/internal/envd"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/kernel"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"

	"golang.org/x/sys/unix"
)

// runAgent is the sandbox's init: finish isolating ourselves, then serve.
func runAgent() int {
	trace.Mark("sandbox init: inits done")
	if os.Getenv(EarlyKernelEnv) != "0" {
		// In stage 1 (this same function, before the re-exec): start the
		// default kernel there (startKernelEarly).
		isolate.SetEarlyStart(startKernelEarly)
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
	cfgFile := os.NewFile(4, "config")
	var cfg agentConfig
	if err := json.NewDecoder(io.LimitReader(cfgFile, 1<<20)).Decode(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: reading config:", err)
		return 1
	}
	cfgFile.Close()
	// The agent and its waiting kernel on one CPU (see cpupin): before the
	// kernel's hello, which tells it the CPU.
	if _, err := cpupin.Pin(cfg.ID); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent:", err) // slower, not less safe
	}
	early, es := adoptKernelEarly()
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
	env := agent.SandboxEnv(cfg.Env)
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
		tag, pyc, err := parseKernelBytecode(f)
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

// agentConfigFD is the agent's config (a pipe from the supervisor; in
// stage 2 a copy stage 1 made of what it read there).
const agentConfigFD = 4

// maxAgentConfig bounds the config the agent reads.
const maxAgentConfig = 1 << 20

// earlyState is what stage 1 tells stage 2 about its early start.
type earlyState struct {
	// Bytecode: the kernel's bytecode is installed (stage 2 only closes
	// its fd).
	Bytecode bool `json:"bytecode,omitempty"`
	// Pid and FDs (stdout, stderr, commands, events) of the default python
	// kernel, 0 = none started.
	Pid int    `json:"pid,omitempty"`
	FDs [4]int `json:"fds,omitempty"`
	// Tools is the tools socket's path the kernel was given.
	Tools string `json:"tools,omitempty"`
}

// startKernelEarly runs in stage 1, fully sandboxed, right before the
// re-exec into stage 2 (isolate.SetEarlyStart): it starts the default
// python kernel exactly as the agent would — same environment, options,
// installed bytecode and tools socket path — so that python's start-up
// (the longest step of a cold start) runs while the binary re-executes and
// the agent sets up. Anything short of that (no prewarm, no python, a
// config it can't read) starts nothing: the agent then does as before, and
// reports any error itself.
func startKernelEarly() (string, []*os.File) {
	trace.Mark("stage 1: early start")
	raw, ok := takeAgentConfig()
	if !ok {
		return "", nil
	}
	var cfg agentConfig
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&cfg); err != nil || cfg.NoPrewarm {
		return "", nil
	}
	// The agent's environment, as stage 2 sets it (runAgent): kernelEnv,
	// the tools socket's directory and the kernel's cache directory come
	// from it. Stage 2's own environment was taken before this.
	os.Clearenv()
	for k, v := range agent.SandboxEnv(cfg.Env) {
		os.Setenv(k, v)
	}
	var es earlyState
	if cfg.KernelBytecodeFD > 2 {
		// Read through a copy, at offsets (the fd itself stays for stage 2
		// to close, unread).
		if fd, err := unix.FcntlInt(uintptr(cfg.KernelBytecodeFD), unix.F_DUPFD_CLOEXEC, 3); err == nil {
			f := os.NewFile(uintptr(fd), "kernel bytecode")
			tag, pyc, err := parseKernelBytecode(f)
			f.Close()
			if err == nil {
				_ = kernel.InstallBytecode("", tag, pyc)
			}
			es.Bytecode = true
			trace.Mark("stage 1: kernel bytecode installed")
		}
	}
	es.Tools = agent.NewToolsSocketPath()
	opts := agent.DefaultKernelOptions(agent.Config{Python: cfg.Python, Workdir: cfg.Workdir, Env: cfg.Env}, es.Tools)
	e, err := kernel.SpawnEarly(opts)
	if err != nil {
		// The agent's own start will fail the same way and say so.
		es.Tools = ""
		j, _ := json.Marshal(es)
		return string(j), nil
	}
	cpupin.Away(e.Pid(), cfg.ID)
	es.Pid, es.FDs = e.Pid(), e.FDs()
	j, _ := json.Marshal(es)
	files := e.Files()
	// Stage 2 may be this same image (isolate hardened stage 1 in place):
	// then it takes e itself, with its own ends of the kernel's pipes,
	// rather than adopt the fds a second time.
	startedEarly = e
	return string(j), files[:]
}

// startedEarly is the kernel startKernelEarly started in this image (nil
// after the re-exec into stage 2, which adopts it by its pid and fds).
var startedEarly *kernel.Early

// takeAgentConfig reads the agent's config from its pipe (stage 1) and
// puts a copy in its place for stage 2 (a memfd at the same fd, read
// from its start).
func takeAgentConfig() ([]byte, bool) {
	// Through a copy: an *os.File of the fd itself would close it from
	// its finalizer, after the memfd has taken its number.
	dup, err := unix.FcntlInt(agentConfigFD, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(dup), "config")
	raw, err := io.ReadAll(io.LimitReader(f, maxAgentConfig))
	f.Close()
	mfd, merr := unix.MemfdCreate("agent config", unix.MFD_CLOEXEC)
	if merr != nil {
		// The pipe is consumed: stage 2 would read nothing. Fail the start
		// rather than guess.
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: memfd for the config:", merr)
		os.Exit(1)
	}
	for b := raw; len(b) > 0; {
		n, werr := unix.Write(mfd, b)
		if werr != nil {
			fmt.Fprintln(os.Stderr, "code-sandboxes agent: copying the config:", werr)
			os.Exit(1)
		}
		b = b[n:]
	}
	if _, err := unix.Seek(mfd, 0, io.SeekStart); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: copying the config:", err)
		os.Exit(1)
	}
	// Close-on-exec for now (isolate restores stage 2's fds after us).
	if err := unix.Dup3(mfd, agentConfigFD, unix.O_CLOEXEC); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: copying the config:", err)
		os.Exit(1)
	}
	unix.Close(mfd)
	return raw, err == nil
}

// adoptKernelEarly takes over, in stage 2, what stage 1's startKernelEarly
// started (nil, and a zero state, if nothing).
func adoptKernelEarly() (*kernel.Early, earlyState) {
	var es earlyState
	st := isolate.EarlyState()
	if st == "" {
		return nil, es
	}
	if err := json.Unmarshal([]byte(st), &es); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: early start state:", err)
		return nil, earlyState{}
	}
	if es.Pid <= 0 {
		return nil, earlyState{Bytecode: es.Bytecode}
	}
	if e := startedEarly; e != nil && e.Pid() == es.Pid {
		// Stage 1 became stage 2 in place: the kernel is ours already.
		startedEarly = nil
		trace.Mark("agent: early kernel taken in place")
		return e, es
	}
	e, err := kernel.AdoptEarly(es.Pid, es.FDs)
	if err != nil {
		// Not expected (our own stage 1's): start afresh without it.
		fmt.Fprintln(os.Stderr, "code-sandboxes agent:", err)
		_ = syscall.Kill(es.Pid, syscall.SIGKILL)
		for _, fd := range es.FDs {
			if fd > 2 {
				syscall.Close(fd)
			}
		}
		return nil, earlyState{Bytecode: es.Bytecode}
	}
	trace.Mark("agent: early kernel adopted")
	return e, es
}
