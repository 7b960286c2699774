// Starting a sandbox: the shim and the supervisor it runs, the room it
// needs, and stopping the supervisor and reading its report.

package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/agentconfig"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
	"github.com/code-sandboxes/code-sandboxes/internal/ids"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/pipinstall"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// launch starts a sandbox and returns once its agent answers. With owner (a
// warm-pool entry) the sandbox is marked as such in its record (List,
// Connect and Kill don't see it) and its supervisor ends it when owner's
// write end closes before a claim (see pool.go). isolation and runsc are
// isolationOf's and checkGVisor's answers for spec.
func launch(ctx context.Context, spec driver.Spec, opts Options, rt string, senv sandboxEnvironment, owner *os.File, isolation, runsc string) (*instance, error) {
	// What dead sandboxes left goes soon, not when someone lists; in the
	// background and at most every sweepEvery, as a sweep reads every
	// sandbox's record (with a thousand alive, tens of milliseconds that
	// each Create would pay).
	sweepSoon(rt)
	if err := checkRoom(); err != nil {
		return nil, fmt.Errorf("create local sandbox: %w", err)
	}
	id := ids.Sandbox('l')
	dir := filepath.Join(rt, dirName(id))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox directory: %w", err)
	}
	var hostUID int
	var err error
	if os.Geteuid() == 0 && isolation == "" {
		if hostUID, err = allocHostUID(rt, dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	workdir := spec.WorkingDir
	if workdir == "" {
		workdir = "/home/user"
	}
	now := time.Now()
	rec := record{ID: id, Name: spec.Name, Tags: spec.Tags, CreatedAt: now, EndAt: now.Add(spec.Lifetime),
		Token: ids.Token(24), Network: spec.Network, AllowedHosts: spec.AllowedHosts, AllowPrivate: spec.AllowPrivate, DeniedHosts: spec.DeniedHosts, Memory: spec.Memory(), CPUs: spec.CPUs, Pids: spec.PidsLimit(defaultPids),
		Environment: senv.Name, BuildID: senv.BuildID, HostUID: hostUID, NoRootUser: opts.NoRootUser, Isolation: isolation, Runsc: runsc, Pool: owner != nil}
	lifetime := spec.Lifetime
	if spec.AutoPause {
		rec.AutoPause, rec.Lifetime = true, spec.Lifetime
		lifetime += autoPauseSlack(rec.Memory) // the supervisor pauses it at EndAt
	}
	if owner != nil {
		// Until claimed, the pool (through owner) decides how long it lives;
		// the agent's own clock is only the backstop.
		lifetime = poolBackstop
		rec.EndAt = now.Add(lifetime)
	}
	// Python "" is python3 from the sandbox's PATH: the rootfs's with an
	// environment (the build's Env may set PATH).
	ss := shimSpec{Dir: dir, Record: rec, Rootfs: senv.Rootfs, Home: opts.HomeSize, Volumes: spec.Volumes, Agent: agentConfig{Base: agentconfig.Base{ID: id, Token: rec.Token, Python: opts.Python,
		Workdir: workdir, Env: mergeEnv(senv.Env, spec.Env), Lifetime: lifetime, IdleTimeout: spec.IdleTimeout,
		NoPrewarm: len(spec.Packages) > 0}}}
	if senv.Rootfs == "" {
		ss.KernelBytecode = kernelBytecodePath(opts.Python)
	}
	if isolation == "" {
		ss.ExecOnlyDir = execOnlyDir(rt)
	}
	exe, err := sandboxBinary(ctx, opts.SandboxBinary)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if isolation == IsolationGVisor {
		ss.Runsc, ss.Exe = runsc, exe
		ss.Record.Checkpoint = checkpointDirOf(id)
	} else if ss.Init, err = initBinary(ctx, exe); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b, _ := json.Marshal(ss)

	readyR, readyW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	env := shimEnv()
	trace.Mark("create: checks done, starting the supervisor")
	// A spare supervisor, started ahead, serves a cold Create (spare.go);
	// not a pool's, which hands its supervisor one more fd.
	var cmd *exec.Cmd
	var spare *spareShim
	if owner == nil {
		spare = takeSpare(exe, env)
	}
	if spare != nil {
		if err := spare.handOver(b, readyW); err == nil {
			cmd = spare.cmd // reaped already (reapLater)
			trace.Mark("create: spare supervisor given the spec")
		} else {
			spare.discard()
			spare = nil
		}
	}
	if cmd == nil {
		shimEnv := append(slices.Clip(env), shimSpecEnv+"="+string(b))
		files := []*os.File{readyW}
		if owner != nil {
			files = append(files, owner) // the shim's fd 4
			shimEnv = append(shimEnv, poolFDEnv+"=4")
		}
		if cmd, err = execShim(exe, dirName(id), shimEnv, files); err != nil {
			readyR.Close()
			readyW.Close()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("start sandbox supervisor: %w", whyNoStart(err))
		}
	}
	readyW.Close()

	trace.Mark("create: supervisor started")
	rep, err := readReport(ctx, readyR)
	readyR.Close()
	trace.Mark("create: supervisor reported")
	if owner == nil && err == nil && rep.OK {
		afterCreate(exe, env, spare != nil)
	}
	if err != nil || !rep.OK {
		stopSupervisor(cmd, dir, stopGrace) // it removes dir once the supervisor is gone
		if err == nil {
			err = errors.New(rep.Error)
			if strings.Contains(rep.Error, homeseed.TooBig) {
				err = fmt.Errorf("%w: %s", sberr.ErrInvalidConfig, rep.Error)
			}
			if strings.Contains(rep.Error, "cgroup") && (spec.MemoryBytes == 0 || spec.Pids == 0) {
				err = fmt.Errorf("%w (the default limits, memory %d MiB and pids %d, need a writable cgroup like any other; to run without them ask for Memory and Pids Unlimited (-1), --memory unlimited --pids unlimited in the CLI)", err, driver.DefaultMemoryBytes>>20, defaultPids)
			}
		}
		return nil, fmt.Errorf("create local sandbox: %w", whyNoStart(err))
	}
	inst := newInstance(rt, id, rec.Token)
	if err := inst.waitHealthy(ctx, 30*time.Second); err != nil {
		log := tail(filepath.Join(dir, "agent.log"), 2048)
		_ = inst.Kill(context.Background())
		switch {
		case strings.Contains(log, homeseed.TooBig): // gVisor's agent seeds the home
			err = fmt.Errorf("%w: %s", sberr.ErrInvalidConfig, strings.TrimSpace(log))
		case log != "":
			err = fmt.Errorf("%w; agent log: %s", err, log)
		}
		return nil, fmt.Errorf("create local sandbox: %w", whyNoStart(err))
	}
	trace.Mark("create: healthy")
	if len(spec.Packages) > 0 {
		if err := pipinstall.Install(ctx, inst.c, opts.Python, spec.PackageIndex, spec.Packages, workdir); err != nil {
			_ = inst.Kill(context.Background())
			return nil, err
		}
	}
	return inst, nil
}

// checkRoom refuses a start that would run the host (or the creator's
// cgroup) out of process ids or memory: started anyway it would fail
// half-way with an error that doesn't say why, or leave the OOM killer to
// choose among what runs, and the sandboxes already running could no
// longer start commands. Retrying later (after others close) can work:
// ErrNoRoom.
func checkRoom() error {
	if err := isolate.CheckRoom(); err != nil {
		return fmt.Errorf("%w: %w", sberr.ErrNoRoom, err)
	}
	return nil
}

// whyNoStart adds to a failed start's error that the host is (nearly) out
// of process ids or memory, when it is: concurrent starts can all pass
// checkRoom and then run out together, and what fails then (a thread
// the Go runtime can't make, a fork) says nothing of the cause.
func whyNoStart(err error) error {
	if terr := isolate.RoomShortage(); terr != nil {
		return fmt.Errorf("%w (likely why, %w: %w)", err, sberr.ErrNoRoom, terr)
	}
	return err
}

// defaultPids keeps a fork bomb from taking the host down even when the user
// set no limit.
const defaultPids = 1024

// shimEnv is a supervisor's environment, without its spec.
func shimEnv() []string {
	return append(append(minimalHostEnv(), sandboxGoEnv...), roleEnv+"="+roleShim)
}

// execShim starts the sandbox binary exe as a supervisor, arg its
// argument (the sandbox directory's name, or a spare's placeholder), files
// its fds from 3 on, in a session of its own (terminal signals for the
// caller's job must not reach it), reaped if it dies while we still run:
// it outlives us.
func execShim(exe, arg string, env []string, files []*os.File) (*exec.Cmd, error) {
	cmd := exec.Command(exe)
	cmd.Args = []string{"code-sandboxes-shim", arg}
	cmd.Env = env
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	reapLater(cmd)
	return cmd, nil
}

func minimalHostEnv() []string {
	var out []string
	for _, k := range []string{"PATH", "HOME", "XDG_RUNTIME_DIR", "CODE_SANDBOXES_RUNTIME_DIR", dnsEnv, trace.Env, stateDirEnv, checkpointTimeoutEnv, EarlyKernelEnv, ReexecEnv, ShimStallEnv} {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// stopSupervisor ends a supervisor whose Create failed or gave up (its
// context cancelled, no report in time). SIGTERM: it may have started the
// sandbox already, which only it knows of, and it ends and cleans that up
// (it keeps a stop signal from before the sandbox's start). dir goes once
// the supervisor is gone (it removes dir itself on every path it controls):
// until then dir keeps the sandbox's host uid claimed and what it started
// findable. A supervisor still there after grace is hung: killed, and what
// its record names cleaned up. In the background: the caller's error
// doesn't wait.
func stopSupervisor(cmd *exec.Cmd, dir string, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		// The wait is reapLater's: poll for the end instead (Process
		// signals through a pidfd, so a reused pid is never hit).
		for end := time.Now().Add(grace); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if cmd.Process.Signal(syscall.Signal(0)) != nil {
				_ = os.RemoveAll(dir)
				return
			}
		}
		_ = cmd.Process.Kill()
		if r, err := readRecord(dir); err == nil {
			cleanupStale(dir, r)
		}
		_ = os.RemoveAll(dir)
	}()
}

// stopGrace is how long a supervisor told to stop may take to end the
// sandbox it started before it is killed.
const stopGrace = 10 * time.Second

func readReport(ctx context.Context, r io.Reader) (shimReport, error) {
	type res struct {
		rep shimReport
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var rep shimReport
		line, err := bufio.NewReader(io.LimitReader(r, 64<<10)).ReadBytes('\n')
		if err != nil && len(line) == 0 {
			ch <- res{err: fmt.Errorf("the sandbox supervisor exited without reporting: %w", err)}
			return
		}
		err = json.Unmarshal(line, &rep)
		ch <- res{rep, err}
	}()
	t := time.NewTimer(60 * time.Second)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.rep, r.err
	case <-ctx.Done():
		return shimReport{}, ctx.Err()
	case <-t.C:
		return shimReport{}, fmt.Errorf("%w: the sandbox supervisor did not report within 60s", sberr.ErrTimeout)
	}
}

func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, _ := f.Stat()
	if st != nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return strings.TrimSpace(string(b))
}
