package local

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/ctragent"
	"github.com/code-sandboxes/code-sandboxes/internal/egress"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
)

// Roles a re-executed binary can play, chosen by the env var roleEnv.
const (
	roleEnv   = "CODE_SANDBOXES_ROLE"
	roleShim  = "shim"
	roleAgent = "agent"
	// shimSpecEnv carries the shim's spec as JSON.
	shimSpecEnv = "CODE_SANDBOXES_SHIM_SPEC"
)

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
	// Restore: bring back the paused sandbox in Dir from its checkpoint
	// (pause.go) instead of starting a new one.
	Restore bool `json:"restore,omitempty"`
	// Image, with Restore, is a snapshot's checkpoint to fork: Dir is
	// then a new sandbox's, with nothing in it yet.
	Image string `json:"image,omitempty"`
}

// agentConfig is what the shim hands the agent, through a pipe (not the
// environment, which user code could read).
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
}

// Main runs the role this process was re-executed for, if any, and exits.
// It returns normally in an ordinary process.
func Main() {
	switch os.Getenv(roleEnv) {
	case roleShim:
		os.Exit(runShim())
	case roleAgent:
		os.Exit(runAgent())
	case roleGVisorAgent:
		os.Exit(ctragent.Run("gvisor agent", runInGVisor))
	}
}

// shimReport is what the shim tells Create on the ready pipe (fd 3).
type shimReport struct {
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
	AgentPid int    `json:"agent_pid,omitempty"`
}

func runShim() int {
	// The supervisor mostly sleeps; one thread is plenty.
	runtime.GOMAXPROCS(1)
	ready := os.NewFile(3, "ready")
	report := func(r shimReport) {
		if ready != nil {
			_ = json.NewEncoder(ready).Encode(r)
			ready.Close()
			ready = nil
		}
	}
	var spec shimSpec
	if err := json.Unmarshal([]byte(os.Getenv(shimSpecEnv)), &spec); err != nil {
		report(shimReport{Error: "bad shim spec: " + err.Error()})
		return 2
	}
	os.Unsetenv(shimSpecEnv)
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
		// /proc/self/exe still works when the binary was deleted after we
		// started (go run removes its temporary build).
		Path:          "/proc/self/exe",
		Args:          []string{"code-sandboxes-agent"},
		Env:           []string{roleEnv + "=" + roleAgent},
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
	// A limit that can't be enforced fails the start, defaults included
	// (there is no retry without them): the caller asks for Unlimited.
	proc, err := isolate.Start(context.Background(), ispec)
	cfgR.Close()
	lnFile.Close()
	if err != nil {
		cfgW.Close()
		return fail(err)
	}
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
			cfgW.Close()
			_ = proc.Kill()
			_, _ = proc.Wait()
			_ = proc.Cleanup()
			return fail(err)
		}
		defer netw.Close()
	}
	_ = json.NewEncoder(cfgW).Encode(spec.Agent)
	cfgW.Close()

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
	report(shimReport{OK: true, AgentPid: proc.Pid})
	return supervise(dir, proc, netw, func() {
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
func supervise(dir string, proc supervised, netw *egress.Stack, closeAll func()) int {
	// Detach from the creator's terminal for good: nothing of ours writes there.
	devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if devnull != nil {
		_ = syscall.Dup2(int(devnull.Fd()), 0)
		_ = syscall.Dup2(int(devnull.Fd()), 1)
		_ = syscall.Dup2(int(devnull.Fd()), 2)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	pp, _ := proc.(pausable)
	if pp != nil {
		pp.handlePause(dir)
	}
	if netw != nil {
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		go func() {
			for range usr1 {
				if cur, err := readRecord(dir); err == nil {
					p := policyOf(cur.Network, cur.AllowedHosts, cur.AllowPrivate)
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
	done := make(chan struct{})
	go func() {
		// Backup for the agent's own lifetime enforcement: if the agent is
		// wedged past its end (+ grace), end it from outside. SetTimeout
		// updates end_at in the record, so re-read it.
		// Sleep until the recorded end (plus grace) rather than polling: an
		// idle host with hundreds of sandboxes should cost nothing.
		const grace = 5 * time.Second
		wake := func() time.Duration {
			cur, err := readRecord(dir)
			if err != nil || cur.EndAt.IsZero() {
				return time.Minute
			}
			return time.Until(cur.EndAt.Add(grace))
		}
		t := time.NewTimer(wake())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-sigs:
				_ = proc.Kill()
				return
			case <-t.C:
				if d := wake(); d > 0 {
					t.Reset(d) // SetTimeout moved the end
					continue
				}
				_ = proc.Kill()
				return
			}
		}
	}()
	_, _ = proc.Wait()
	close(done)
	_ = proc.Kill() // whatever is left in the cgroup
	_ = proc.Cleanup()
	closeAll()
	if pp != nil && pp.pausedOK() {
		pp.finishPause(dir)
		return 0
	}
	_ = os.RemoveAll(dir)
	return 0
}

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
	return egress.Start(tun, policyOf(r.Network, r.AllowedHosts, r.AllowPrivate), egress.Options{DNS: dns, Logf: logger.Printf})
}
