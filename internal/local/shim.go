package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/ctragent"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/earlystart"
	"github.com/code-sandboxes/code-sandboxes/internal/egress"
	"github.com/code-sandboxes/code-sandboxes/internal/envd"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// Roles a re-executed binary can play, chosen by the env var roleEnv.
const (
	roleEnv   = earlystart.RoleEnv
	roleShim  = "shim"
	roleAgent = "agent"
	// shimSpecEnv carries the shim's spec as JSON.
	shimSpecEnv = "CODE_SANDBOXES_SHIM_SPEC"
)

// sandboxGoEnv is the Go runtime's settings for every process of a
// sandbox that runs this binary (supervisor, agent, root broker), in their
// environment so they hold from the runtime's first instruction: one P, so
// no extra threads (Ms) or GC workers get started during package inits that
// an idle process would then keep (each thread counts against pid_max and
// the sandbox's pids limit). The agent clears its environment before it
// starts anything, so user code doesn't see them.
var sandboxGoEnv = []string{"GOMAXPROCS=1"}

// shimSpec is what Create hands the shim.
type shimSpec struct {
	Dir    string      `json:"dir"`
	Record record      `json:"record"`
	Agent  agentConfig `json:"agent"`
	Home   int64       `json:"home_bytes"`
	// TmpSize is /tmp's size (0 = the default).
	TmpSize int64 `json:"tmp_bytes"`
	// Rootfs is the environment's root filesystem ("" = the host's system
	// directories), the sandbox's read-only root.
	Rootfs string `json:"rootfs,omitempty"`
	// Runsc and Exe (the agent binary bound into the sandbox) are set
	// with Record.Isolation gvisor.
	Runsc string `json:"runsc,omitempty"`
	Exe   string `json:"exe,omitempty"`
	// KernelBytecode is the file of the kernel's compiled bytecode for the
	// sandbox's interpreter ("" = none; see bytecode.go).
	KernelBytecode string `json:"kernel_bytecode,omitempty"`
	// Restore: bring back the paused sandbox in Dir from its checkpoint
	// (pause.go) instead of starting a new one.
	Restore bool `json:"restore,omitempty"`
	// Image, with Restore, is a snapshot's checkpoint to fork: Dir is
	// then a new sandbox's, with nothing in it yet.
	Image string `json:"image,omitempty"`
	// ExecOnlyDir is isolate.Spec's (execOnlyDir).
	ExecOnlyDir string `json:"exec_only_dir,omitempty"`
	// Volumes are bound read-write into the sandbox (isolate.Spec.Volumes).
	Volumes []driver.Volume `json:"volumes,omitempty"`
	// Init is the binary the sandbox's stage 1 runs (isolate.Spec.Init), as
	// the caller checked it (initBinary; nil = the sandbox binary runs it).
	Init *checkedBinary `json:"init,omitempty"`
}

// agentConfig is what the shim hands the agent (earlystart.AgentConfig:
// the init binary reads it too).
type agentConfig = earlystart.AgentConfig

// Main runs the role this process was re-executed for, if any, and exits.
// It returns normally in an ordinary process.
func Main() {
	if envd.IsFSHelper() {
		// A filesystem RPC for root, run by the broker as root (envd's
		// fshelper.go); before IsSudo: it is the sudo binary.
		os.Exit(envd.FSHelperMain())
	}
	if isolate.IsSudo() {
		// The sandbox's sudo (this binary bound at isolate.SudoPath).
		os.Exit(isolate.Sudo())
	}
	switch os.Getenv(roleEnv) {
	case roleShim:
		os.Exit(runShim())
	case roleAgent:
		os.Exit(runAgent())
	case roleGVisorAgent:
		os.Exit(ctragent.Run("gvisor agent", runInGVisor))
	case roleFingerprint:
		fmt.Println(earlystart.Stamp(protocolFingerprint()))
		os.Exit(0)
	}
}

// shimReport is what the shim tells Create on the ready pipe (fd 3).
type shimReport struct {
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
	AgentPid int    `json:"agent_pid,omitempty"`
}

func runShim() int {
	trace.Mark("shim: inits done")
	// The supervisor mostly sleeps; one thread is plenty.
	runtime.GOMAXPROCS(1)
	raw := []byte(os.Getenv(shimSpecEnv))
	if os.Getenv(shimSpareEnv) != "" {
		// Started ahead (spare.go): the spec and the ready pipe come now.
		os.Unsetenv(shimSpareEnv)
		var ok bool
		if raw, ok = awaitSpareSpec(); !ok {
			return 0
		}
	}
	ready := os.NewFile(3, "ready")
	report := func(r shimReport) {
		if ready != nil {
			_ = json.NewEncoder(ready).Encode(r)
			ready.Close()
			ready = nil
		}
	}
	var spec shimSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		report(shimReport{Error: "bad shim spec: " + err.Error()})
		return 2
	}
	os.Unsetenv(shimSpecEnv)
	nameSpare(spec.Dir)
	// A warm-pool sandbox lives while its pool's owner holds the other end
	// of this pipe, until claimed (see pool.go).
	var owner *os.File
	if os.Getenv(poolFDEnv) != "" {
		owner = os.NewFile(4, "pool")
		syscall.CloseOnExec(4)
		os.Unsetenv(poolFDEnv)
	}
	dir := spec.Dir
	fail := func(err error) int {
		report(shimReport{Error: err.Error()})
		_ = os.RemoveAll(dir)
		return 1
	}

	if spec.Restore {
		// A failed restore keeps the checkpoint: the sandbox stays paused.
		fail = func(err error) int {
			report(shimReport{Error: err.Error()})
			return 1
		}
	}
	// From here on a stop signal (a Create that gave up: cancelled, or
	// timed out waiting for the report) is kept, not fatal: a sandbox
	// started meanwhile is ended and cleaned up by supervise, which reads
	// it first thing, instead of left running with nobody knowing of it.
	stopSignals()
	if spec.Record.Isolation == IsolationGVisor {
		return runGVisorShim(spec, report, fail)
	}
	sock := filepath.Join(dir, socketFile)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fail(fmt.Errorf("listen on %s: %w", sock, err))
	}
	_ = os.Chmod(sock, 0o600)
	lnFile, err := ln.(*net.UnixListener).File()
	if err != nil {
		return fail(err)
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	r := spec.Record
	network := isolate.NetworkNone
	if r.Network != "none" {
		network = isolate.NetworkTUN
	}
	ispec := isolate.Spec{
		// The sandbox runs this binary from an execute-only copy, so that
		// the agent is never dumpable (isolate's execonly.go).
		ExecOnlyDir: spec.ExecOnlyDir,
		// /proc/self/exe still works when the binary was deleted after we
		// started (go run removes its temporary build).
		Path:          "/proc/self/exe",
		Args:          []string{"code-sandboxes-agent"},
		Env:           append([]string{roleEnv + "=" + roleAgent}, sandboxGoEnv...),
		ExtraFiles:    []*os.File{lnFile, cfgR},
		Stdout:        logf,
		Stderr:        logf,
		Hostname:      "sandbox",
		Network:       network,
		MemoryBytes:   r.Memory,
		CPUs:          r.CPUs,
		Pids:          r.Pids,
		HomeSizeBytes: spec.Home,
		TmpSizeBytes:  spec.TmpSize,
		Rootfs:        spec.Rootfs,
		HostUID:       r.HostUID,
		HostGID:       r.HostUID,
	}
	for _, v := range spec.Volumes {
		ispec.Volumes = append(ispec.Volumes, isolate.Bind{Source: v.Source, Target: v.Path})
	}
	if spec.Init != nil {
		f, err := openChecked(*spec.Init)
		if err != nil {
			return fail(err)
		}
		ispec.Init = f
	}
	for _, k := range []string{EarlyKernelEnv, ReexecEnv} {
		if v, ok := os.LookupEnv(k); ok {
			ispec.Env = append(ispec.Env, k+"="+v)
		}
	}
	if r.HostUID != 0 && !r.NoRootUser {
		// A root user inside (isolate's rootuser.go), as E2B's sudo and
		// user: 'root' expect; only root callers have host ids to give it.
		ispec.HostRootUID, ispec.HostRootGID = rootHostUID(r.HostUID), rootHostUID(r.HostUID)
	}
	// The agent's config goes into the pipe now, not after the sandbox is
	// up: the agent reads it first thing, and must not wait for this
	// process to be scheduled again. (A goroutine: a config bigger than the
	// pipe's buffer would block until the agent reads; if the agent never
	// comes up the write fails with EPIPE once cfgR is closed below.)
	var pycFile *os.File
	if spec.KernelBytecode != "" {
		// The kernel's bytecode goes to the agent as the cache file itself
		// (read-only; the agent reads it and closes it before anything runs
		// in the sandbox), not inside the config: 150 KiB as base64 JSON
		// cost both processes CPU and the agent's heap the garbage. Best
		// effort: without it the kernel compiles its source.
		if f, err := os.Open(spec.KernelBytecode); err == nil {
			pycFile = f
			ispec.ExtraFiles = append(ispec.ExtraFiles, f)
			spec.Agent.KernelBytecodeFD = 2 + len(ispec.ExtraFiles)
		}
	}
	go func() {
		_ = json.NewEncoder(cfgW).Encode(spec.Agent)
		cfgW.Close()
	}()
	if tf := trace.File(); tf != nil {
		// The trace fd follows the others; the agent seals it from its
		// children.
		ispec.ExtraFiles = append(ispec.ExtraFiles, tf)
		ispec.Env = append(ispec.Env, trace.FDEnv+"="+strconv.Itoa(2+len(ispec.ExtraFiles)))
	}
	if stopRequested() {
		return fail(errGaveUp)
	}
	trace.Mark("shim: listening, isolate.Start")
	// A limit that can't be enforced fails the start, defaults included
	// (there is no retry without them): the caller asks for Unlimited.
	proc, err := isolate.Start(context.Background(), ispec)
	trace.Mark("shim: isolate.Start returned")
	if pycFile != nil {
		pycFile.Close()
	}
	if ispec.Init != nil {
		ispec.Init.Close() // the sandbox executed it (or never will)
	}
	cfgR.Close()
	lnFile.Close()
	if err != nil {
		return fail(err)
	}
	stallForTest(proc.Pid)
	// The agent is the OOM killer's last choice (set before its children
	// exist: they inherit it, and the agent raises theirs). Lowering a score
	// needs CAP_SYS_RESOURCE; without it the agent keeps 0, still below its
	// children's 500, so a failure here only narrows the margin.
	_ = procstat.SetOOMScoreAdj(proc.Pid, procstat.OOMScoreAgent)
	var netw *egress.Stack
	if proc.TUN != nil {
		runtime.GOMAXPROCS(2) // the network stack works on packets while the sandbox talks
		netw, err = startNetwork(dir, &r, proc.TUN)
		if err != nil {
			_ = proc.Kill()
			_, _ = proc.Wait()
			_ = proc.Cleanup()
			return fail(err)
		}
		defer netw.Close()
	}

	r.ShimPid = os.Getpid()
	r.ShimStart = procStart(os.Getpid())
	r.AgentPid = proc.Pid
	r.Cgroups = proc.CgroupDirs()
	if err := writeRecord(dir, &r); err != nil {
		_ = proc.Kill()
		_, _ = proc.Wait()
		_ = proc.Cleanup()
		return fail(err)
	}
	listenShimSignals() // before the report: see there
	report(shimReport{OK: true, AgentPid: proc.Pid})
	trace.Mark("shim: reported")
	// From here on the supervisor mostly sleeps, one per sandbox: give back
	// what start-up (the program's package inits included) left on the heap.
	// (Ending the threads the start left idle was tried too: with it,
	// TestLocalGVisorSnapshotFork's restored counter stopped running in
	// about half the runs, for a reason not found; it saved about one
	// thread per sandbox.)
	go debug.FreeOSMemory()
	return supervise(dir, proc, netw, owner, func() {
		ln.Close()
		// Close the log before the directory goes: on a busy disk the close can
		// block (ext4 discard), and a supervisor still alive after its
		// directory vanished looks leaked to anyone listing sandboxes.
		logf.Close()
	})
}

// supervised is the sandbox the shim watches: an isolate.Process, or a
// gVisor sandbox.
type supervised interface {
	Wait() (isolate.ExitInfo, error)
	Kill() error
	Cleanup() error
}

// supervise runs the shim once the sandbox is up: policy updates
// (SIGUSR1), the lifetime backstop, and the cleanup when it ends.
func supervise(dir string, proc supervised, netw *egress.Stack, owner *os.File, closeAll func()) int {
	// Detach from the creator's terminal for good: nothing of ours writes there.
	devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if devnull != nil {
		_ = syscall.Dup2(int(devnull.Fd()), 0)
		_ = syscall.Dup2(int(devnull.Fd()), 1)
		_ = syscall.Dup2(int(devnull.Fd()), 2)
	}

	sigs := stopSignals()
	pp, _ := proc.(pausable)
	if pp != nil {
		pp.handlePause(dir)
	}
	if netw != nil {
		listenShimSignals()
		go func() {
			for range policySig {
				if cur, err := readRecord(dir); err == nil {
					p := cur.policy()
					if err := netw.SetPolicy(p); err != nil {
						netw.Logf("egress: policy update refused: %v", err)
						_ = egress.WriteApplied(dir, "error: "+err.Error())
						continue
					}
					_ = egress.WriteApplied(dir, egress.Digest(p))
				}
			}
		}()
	}
	if owner != nil {
		go watchOwner(owner, proc)
	}
	done := make(chan struct{})
	var killed atomic.Bool // a kill came, even during a pause: no paused record
	go func() {
		// Backup for the agent's own lifetime enforcement: if the agent is
		// wedged past its end (+ grace), end it from outside. SetTimeout
		// updates end_at in the record, so re-read it.
		// Sleep until the recorded end (plus grace) rather than polling: an
		// idle host with hundreds of sandboxes should cost nothing.
		// An AutoPause sandbox is paused at its end (autopause.go), and
		// SIGWINCH says SetTimeout moved it.
		wake := func() time.Duration { return lifetimeWake(dir, pp != nil) }
		var moved chan os.Signal // nil: never ready
		if pp != nil {
			listenShimSignals()
			moved = timeoutSig
		}
		t := time.NewTimer(wake())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-sigs:
				killed.Store(true)
				_ = proc.Kill()
				return
			case <-moved:
				t.Reset(wake())
			case <-t.C:
				if d := wake(); d > 0 {
					t.Reset(d) // SetTimeout moved the end
					continue
				}
				// In the background: a kill during the auto-pause must
				// still be heard (above).
				go endLifetime(dir, proc)
			}
		}
	}()
	_, _ = proc.Wait()
	close(done)
	_ = proc.Kill() // whatever is left in the cgroup
	_ = proc.Cleanup()
	closeAll()
	if pp != nil && pp.pausedOK() {
		if !killed.Load() {
			pp.finishPause(dir)
			return 0
		}
		if r, err := readRecord(dir); err == nil {
			removeCheckpoint(r) // killed while it paused: nothing is kept
		}
	}
	_ = os.RemoveAll(dir)
	return 0
}

// errGaveUp: a stop signal came before the supervisor started the sandbox.
var errGaveUp = errors.New("its Create gave up before the sandbox started")

// stopRequested reports whether a stop signal came (and leaves it for
// supervise).
func stopRequested() bool {
	c := stopSignals()
	select {
	case sig := <-c:
		select {
		case c <- sig:
		default: // another came meanwhile: one is enough
		}
		return true
	default:
		return false
	}
}

// ShimStallEnv, a file's path in the environment of the program that
// creates local sandboxes, makes a supervisor write its sandbox's agent pid
// there once the sandbox runs and wait shimStall before it records and
// reports it (a test's way to give up a Create in that moment).
const ShimStallEnv = "CODE_SANDBOXES_TEST_SHIM_STALL"

const shimStall = 3 * time.Second

// stallForTest is ShimStallEnv's stall, pid the started sandbox's agent
// (TestLocalGivenUpCreateEndsItsSandbox, TestLocalGVisorGivenUpForkEndsIt).
func stallForTest(pid int) {
	p := os.Getenv(ShimStallEnv)
	if p == "" {
		return
	}
	// Whole when it appears: written aside, then renamed.
	tmp := p + ".tmp"
	if f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600); err == nil {
		_, _ = f.WriteString(strconv.Itoa(pid))
		f.Close()
		_ = os.Rename(tmp, p)
	}
	time.Sleep(shimStall)
}

// stopSignals is where the supervisor hears SIGTERM, SIGINT and SIGHUP,
// from the first call on (runShim's, before the sandbox starts).
var stopSignals = sync.OnceValue(func() chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	return c
})

// dnsEnv names upstream resolvers ("ip:port,ip:port") for the sandboxes'
// own resolver instead of the host's /etc/resolv.conf ones (tests set it to
// a resolver with a test zone).
const dnsEnv = "CODE_SANDBOXES_DNS"

// maxNetLog bounds network.log: refusals are logged, and hostile code can
// make as many as it likes.
const maxNetLog = 1 << 20

// startNetwork runs the sandbox's network (network all or allowlist) on the
// host end of its TUN device.
func startNetwork(dir string, r *record, tun *os.File) (*egress.Stack, error) {
	f, err := os.OpenFile(filepath.Join(dir, "network.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		tun.Close()
		return nil, err
	}
	lw := &egress.CappedWriter{W: f, Left: maxNetLog}
	logger := log.New(lw, "", log.LstdFlags)
	var dns []string
	if v := os.Getenv(dnsEnv); v != "" {
		dns = strings.Split(v, ",")
	}
	return egress.Start(tun, r.policy(), egress.Options{DNS: dns, Logf: logger.Printf})
}

// watchOwner ends an unclaimed warm-pool sandbox when its pool's owner goes
// (the pipe's write end closes: ClosePools, exit, or a crash alike). The
// claim writes poolClaimed first, after which the sandbox is the caller's
// like any other.
func watchOwner(owner *os.File, proc supervised) {
	defer owner.Close()
	var b [1]byte
	if n, _ := owner.Read(b[:]); n == 1 && b[0] == poolClaimed {
		return
	}
	_ = proc.Kill()
}
