//go:build linux

package earlystart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/cpupin"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/kernel"
	"github.com/code-sandboxes/code-sandboxes/internal/sandboxenv"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// Start runs in stage 1, fully sandboxed, right before the re-exec into
// stage 2 (isolate.SetEarlyStart): it starts the default python kernel
// exactly as the agent would — same environment, options, installed
// bytecode and tools socket path — so that python's start-up (the longest
// step of a cold start) runs while the binary re-executes and the agent
// sets up. Anything short of that (no prewarm, no python, a config it can't
// read) starts nothing: the agent then does as before, and reports any
// error itself.
func Start() (string, []*os.File) {
	trace.Mark("stage 1: early start")
	raw, ok := takeConfig()
	if !ok {
		return "", nil
	}
	var cfg AgentConfig
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&cfg); err != nil || cfg.NoPrewarm {
		return "", nil
	}
	// The agent's environment, as stage 2 sets it: the kernel's
	// environment, the tools socket's directory and the kernel's cache
	// directory come from it. Stage 2's own environment was taken before
	// this.
	os.Clearenv()
	for k, v := range sandboxenv.Env(cfg.Env) {
		os.Setenv(k, v)
	}
	var es State
	if cfg.KernelBytecodeFD > 2 {
		// Read through a copy, at offsets (the fd itself stays for stage 2
		// to close, unread).
		if fd, err := unix.FcntlInt(uintptr(cfg.KernelBytecodeFD), unix.F_DUPFD_CLOEXEC, 3); err == nil {
			f := os.NewFile(uintptr(fd), "kernel bytecode")
			tag, pyc, err := ParseBytecode(f)
			f.Close()
			if err == nil {
				_ = kernel.InstallBytecode("", tag, pyc)
			}
			es.Bytecode = true
			trace.Mark("stage 1: kernel bytecode installed")
		}
	}
	es.Tools = sandboxenv.NewToolsSocketPath()
	e, err := kernel.SpawnEarly(sandboxenv.DefaultKernelOptions(cfg.Python, cfg.Workdir, cfg.Env, es.Tools))
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
	startedHere = e
	return string(j), files[:]
}

// startedHere is the kernel Start started in this image (nil after the
// re-exec into stage 2, which adopts it by its pid and fds).
var startedHere *kernel.Early

// takeConfig reads the agent's config from its pipe (stage 1) and puts a
// copy in its place for stage 2 (a memfd at the same fd, read from its
// start).
func takeConfig() ([]byte, bool) {
	// Through a copy: an *os.File of the fd itself would close it from
	// its finalizer, after the memfd has taken its number.
	dup, err := unix.FcntlInt(ConfigFD, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(dup), "config")
	raw, err := io.ReadAll(io.LimitReader(f, MaxConfig))
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
	if err := unix.Dup3(mfd, ConfigFD, unix.O_CLOEXEC); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: copying the config:", err)
		os.Exit(1)
	}
	unix.Close(mfd)
	return raw, err == nil
}

// Adopt takes over, in stage 2, what stage 1's Start started (nil, and a
// zero state, if nothing).
func Adopt() (*kernel.Early, State) {
	var es State
	st := isolate.EarlyState()
	if st == "" {
		return nil, es
	}
	if err := json.Unmarshal([]byte(st), &es); err != nil {
		fmt.Fprintln(os.Stderr, "code-sandboxes agent: early start state:", err)
		return nil, State{}
	}
	if es.Pid <= 0 {
		return nil, State{Bytecode: es.Bytecode}
	}
	if e := startedHere; e != nil && e.Pid() == es.Pid {
		// Stage 1 became stage 2 in place: the kernel is ours already.
		startedHere = nil
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
		return nil, State{Bytecode: es.Bytecode}
	}
	trace.Mark("agent: early kernel adopted")
	return e, es
}

// ParseBytecode reads a kernel bytecode file the caller compiled (in the
// sandbox, from the fd the supervisor passed): its tag line, then the pyc.
func ParseBytecode(f *os.File) (tag string, pyc []byte, err error) {
	// One read of the file's size at offset 0 (the fd's offset is shared
	// with the copies stage 2 gets, and stays put), not a ReadAll that
	// grows its buffer: this runs on the cold start's path.
	st, err := f.Stat()
	if err != nil {
		return "", nil, err
	}
	if st.Size() > maxBytecode {
		return "", nil, errors.New("kernel bytecode: file too large")
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return "", nil, err
	}
	t, p, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return "", nil, errors.New("kernel bytecode: bad file")
	}
	return string(t), p, nil
}

// maxBytecode bounds the bytecode file the sandbox reads (the kernel's own
// bound, 4 MiB, plus its tag).
const maxBytecode = 4<<20 + 256

// InitMain is cmd/code-sandboxes-init's main: a local sandbox's stage 1,
// which starts the default kernel early (Start) and re-executes into the
// sandbox binary for stage 2 (isolate.Spec.Init), or the fingerprint
// its caller asks for. It never returns.
func InitMain() {
	if os.Getenv(RoleEnv) == RoleFingerprint {
		fmt.Println(Stamp(Fingerprint()))
		os.Exit(0)
	}
	if !isolate.IsChild() {
		fmt.Fprintf(os.Stderr, "%s runs the first stage of local sandboxes for the code-sandboxes-sandbox beside it; it is not meant to be run by hand\n", InitName)
		os.Exit(2)
	}
	if os.Getenv(KernelEnv) != "0" {
		isolate.SetEarlyStart(Start)
	}
	// Stage 1 ends in the re-exec (isolate reports a failure to the
	// supervisor itself and exits): it returns only in another stage,
	// which is the sandbox binary's.
	_, err := isolate.ChildAsync()
	if err == nil {
		err = fmt.Errorf("started for a later stage, which %s does not run", InitName)
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", InitName, err)
	os.Exit(1)
}
