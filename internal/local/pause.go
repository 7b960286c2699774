package local

// Pause and resume (isolation gvisor only): the whole gVisor sandbox — the
// agent, its kernels, every process, their memory and the tmpfs contents —
// is written to disk by runsc checkpoint, and the sandbox ends; nothing
// runs while it is paused. Resume is runsc restore of that checkpoint
// under the same id, in the same directory: the same token works, and the
// handle reconnects through the same socket path.
//
// Why gVisor's checkpoint: CRIU (the only checkpointer for ordinary
// processes) fails on this project's kernels already at `criu check`; the
// gVisor Sentry holds the sandbox's whole kernel state in its own memory
// and serialises it itself.
//
// What runsc (Debian's 2022 build) can't save, and how it is handled:
//   - host sockets: the agent's socket is one (--host-uds=create), so the
//     agent closes it and every connection before the checkpoint and opens
//     it again after the restore (ctragent/pause.go, agent/quiesce.go);
//   - the network of all and allowlist (--network=host: host sockets):
//     refused with the reason, network none only;
//   - a failed checkpoint ends the gVisor sandbox, --leave-running or not
//     (measured): the quiesce above removes the one cause we know of.
//
// The handshake between the caller and the shim: the caller removes
// pauseResult and sends the shim SIGUSR2; the shim quiesces the agent,
// checkpoints, and writes pauseResult ("ok" or the error). On "ok" the shim
// has exited and left the directory with a paused record.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/ctragent"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/records"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

const (
	// stateDirEnv overrides the state directory (default
	// /var/lib/code-sandboxes): checkpoints of paused sandboxes (paused/)
	// and snapshots (snapshots/), each 0700 and root's: a checkpoint
	// holds the sandbox's memory, its token included.
	stateDirEnv = "CODE_SANDBOXES_STATE_DIR"
	pauseResult = "pause.result"
	// quiesceWait bounds how long the agent may take to close its socket.
	quiesceWait = 10 * time.Second
)

// StatusPaused is Info.Status of a paused sandbox.
const StatusPaused = "paused"

type pauseState struct {
	mu     sync.Mutex
	ok     bool
	serial sync.Mutex // checkpointOnce
}

// pausable is a supervised sandbox that can pause.
type pausable interface {
	handlePause(dir string)
	pausedOK() bool
	finishPause(dir string)
}

// handlePause runs a pause on each SIGUSR2 to the shim.
func (g *gvisorSandbox) handlePause(dir string) {
	usr2 := listenShimSignals()
	go func() {
		for range usr2 {
			if err := g.checkpointOnce(dir); err != nil {
				_ = os.WriteFile(filepath.Join(dir, pauseResult), []byte("error: "+err.Error()), 0o600)
				continue
			}
			return // the sandbox ends; supervise writes the result
		}
	}()
}

// checkpoint quiesces the agent and checkpoints the sandbox, which ends.
// An error before runsc checkpoint leaves the sandbox running.
func (g *gvisorSandbox) checkpoint(dir string) error {
	if r, err := readRecord(dir); err == nil {
		// Before the agent is touched: refused, the sandbox just runs on.
		if err := g.checkSpaceForCheckpoint(r.Checkpoint, r.Memory); err != nil {
			return err
		}
	}
	ctl := filepath.Join(dir, gvisorDir, "run", ctragent.CtlDir)
	marker := filepath.Join(ctl, ctragent.QuiescedFile)
	_ = os.Remove(marker)
	if err := g.tellAgent(ctl, "quiesce", "USR2"); err != nil {
		return err
	}
	deadline := time.Now().Add(quiesceWait)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = g.tellAgent(ctl, "resume", "USR1") // serve again
			return fmt.Errorf("%w: the agent did not close its socket within %s; the sandbox keeps running", sberr.ErrTimeout, quiesceWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r, err := readRecord(dir)
	if err != nil {
		_ = g.tellAgent(ctl, "resume", "USR1")
		return err
	}
	img := r.Checkpoint
	_ = os.RemoveAll(img)
	if err := ensureStateDir(filepath.Dir(img)); err != nil {
		_ = g.tellAgent(ctl, "resume", "USR1")
		return err
	}
	if err := os.Mkdir(img, 0o700); err != nil {
		_ = g.tellAgent(ctl, "resume", "USR1")
		return err
	}
	g.pause.mu.Lock()
	defer g.pause.mu.Unlock()
	out, err := g.runscBounded(checkpointBound(r.Memory), nil, "checkpoint", "--image-path", img, g.id)
	if err != nil {
		// runsc ends the sandbox on a failed checkpoint, and an abandoned
		// one may leave it wedged: it serves again or is ended
		// (pause_bound.go).
		return g.checkpointFailed(dir, ctl, marker, img, fmt.Errorf("runsc checkpoint: %w: %s", err, firstLine(string(out))))
	}
	g.pause.ok = true
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

func (g *gvisorSandbox) pausedOK() bool {
	g.pause.mu.Lock()
	defer g.pause.mu.Unlock()
	return g.pause.ok
}

// finishPause records the sandbox as paused once its processes are gone.
func (g *gvisorSandbox) finishPause(dir string) {
	r, err := readRecord(dir)
	if err == nil {
		r.Paused = true
		r.Remaining = time.Until(r.EndAt)
		if r.Remaining < time.Second {
			r.Remaining = time.Second
		}
		r.ShimPid, r.ShimStart, r.AgentPid, r.Cgroups = 0, 0, 0, nil
		err = writeRecord(dir, r)
	}
	res := "ok"
	if err != nil {
		res = "error: recording the pause: " + err.Error()
	}
	_ = os.WriteFile(filepath.Join(dir, pauseResult), []byte(res), 0o600)
}

// restoreGVisor is startGVisor for a paused sandbox: runsc restore of its
// checkpoint, with the bundle it was created with.
func restoreGVisor(spec shimSpec, logf *os.File, beforeStart func(tun *os.File) error) (_ *gvisorSandbox, err error) {
	r := spec.Record
	if r.Network != "none" {
		return nil, fmt.Errorf("%w: restoring network %s", sberr.ErrNotSupported, r.Network)
	}
	base := filepath.Join(spec.Dir, gvisorDir)
	g := &gvisorSandbox{runsc: spec.Runsc, root: filepath.Join(base, "state"), id: "cs-" + dirName(r.ID)[:24],
		flags: []string{"--network=none", "--host-uds=create"}}
	img := r.Checkpoint
	if spec.Image != "" {
		// A fork: a new sandbox directory around the snapshot's image,
		// and the new id and token for the agent.
		if g, _, err = prepareGVisor(spec); err != nil {
			return nil, err
		}
		run := filepath.Join(base, "run")
		_ = os.Remove(filepath.Join(run, ctragent.ConfigFile)) // the restored agent read its own long ago
		b, _ := json.Marshal(ctragent.Identity{ID: spec.Agent.ID, Token: spec.Agent.Token})
		f := filepath.Join(run, ctragent.CtlDir, ctragent.IdentityFile)
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return nil, err
		}
		if err := os.Chown(f, ctlOwner(filepath.Dir(f)), isolate.SandboxGID); err != nil {
			return nil, err
		}
		img = spec.Image
	} else {
		_, _ = g.runscBounded(runscShortWait, nil, "delete", "--force", g.id) // what the checkpointed one left
	}
	pidFile := filepath.Join(base, "pid")
	_ = os.Remove(pidFile)
	if img == "" {
		return nil, fmt.Errorf("sandbox %s has no checkpoint", r.ID)
	}
	// Deleted on any failure: a restore abandoned past its bound leaves a
	// half-restored sandbox (pause_bound.go).
	defer func() {
		if err != nil {
			g.destroy()
		}
	}()
	if _, err := g.runscBounded(checkpointBound(r.Memory), logf, "restore", "--detach", "--bundle", filepath.Join(base, "bundle"),
		"--image-path", img, "--pid-file", pidFile, g.id); err != nil {
		return nil, fmt.Errorf("runsc restore: %w", err)
	}
	if g.pid, err = readPidFile(pidFile, "runsc restore"); err != nil {
		return nil, err
	}
	g.start = procStart(g.pid)
	g.cgroups = gvisorCgroups(g.pid)
	if err := beforeStart(nil); err != nil {
		return nil, err
	}
	// The agent listens again.
	if err := g.tellAgent(filepath.Join(base, "run", ctragent.CtlDir), "resume", "USR1"); err != nil {
		return nil, err
	}
	g.waitCmd = g.runscCmd("wait", g.id)
	if err := g.waitCmd.Start(); err != nil {
		return nil, fmt.Errorf("runsc wait: %w", err)
	}
	// The checkpoint is spent: the sandbox runs on from here.
	removeCheckpoint(&r)
	return g, nil
}

// stateDir is where checkpoints live: on disk (the runtime directory is
// usually a tmpfs, and a pause is meant to free memory).
func stateDir() string {
	if d := os.Getenv(stateDirEnv); d != "" {
		return d
	}
	return "/var/lib/code-sandboxes"
}

func ensureStateDir(dir string) error { return records.EnsureDir(dir, stateDirEnv) }

// checkpointDirOf is where sandbox id's pause writes it.
func checkpointDirOf(id string) string {
	return filepath.Join(stateDir(), "paused", dirName(id))
}

// removeCheckpoint removes a sandbox's checkpoint: only the one its
// record names and only if it is where checkpointDirOf puts one (a
// corrupt record must not make us remove another path).
func removeCheckpoint(r *record) {
	c := r.Checkpoint
	if c == "" || filepath.Base(c) != dirName(r.ID) || filepath.Base(filepath.Dir(c)) != "paused" {
		return
	}
	_ = os.RemoveAll(c)
}

// pausableRecord refuses a pause of what can't pause, with the reason.
func pausableRecord(r *record) error {
	if r.Isolation != IsolationGVisor {
		return fmt.Errorf("%w: pause needs isolation gvisor (gVisor checkpoints the whole sandbox; CRIU, which isolation namespaces would need, fails on this kernel): create the sandbox with isolation gvisor", sberr.ErrNotSupported)
	}
	if r.Network != "none" {
		// Measured: runsc refuses any checkpoint under --network=host
		// ("checkpoint not supported when using hostinet"), sockets or not.
		return fmt.Errorf("%w: sandbox %s has network %s, which runs gVisor on the host's network stack (runsc --network=host, hostinet), and runsc can't checkpoint hostinet; pause needs network none", sberr.ErrNotSupported, r.ID, r.Network)
	}
	return nil
}

// Pause checkpoints the sandbox to disk and ends its processes. If ctx
// ends first the pause goes on in the supervisor: the sandbox ends up
// paused or running, never half, and Info says which.
func (i *instance) Pause(ctx context.Context) error {
	r, err := i.record()
	if err != nil {
		return err
	}
	if r, err = i.waitPausing(ctx, r); err != nil {
		return err
	}
	if r.Paused {
		return nil
	}
	if err := pausableRecord(r); err != nil {
		return err
	}
	if !r.alive() {
		return fmt.Errorf("sandbox %s: %w (it expired or was killed)", i.id, sberr.ErrNotFound)
	}
	if err := ctx.Err(); err != nil {
		return err // not started: the sandbox runs on
	}
	res := filepath.Join(i.dir(), pauseResult)
	_ = os.Remove(res)
	_ = i.Release() // our connections would only be cut
	if err := syscall.Kill(r.ShimPid, syscall.SIGUSR2); err != nil {
		return fmt.Errorf("sandbox %s: signal its supervisor: %w", i.id, err)
	}
	ctx, cancel := context.WithTimeout(ctx, pauseWaitFor(r.Memory))
	defer cancel()
	for {
		if b, err := os.ReadFile(res); err == nil && len(b) > 0 {
			_ = os.Remove(res)
			if s := string(b); s != "ok" {
				if strings.Contains(s, "keeps running") {
					// Its agent listens again: answer once it serves.
					_ = i.waitHealthy(ctx, relistenWait)
				}
				return fmt.Errorf("%w: pause sandbox %s: %s", sberr.ErrUnavailable, i.id, strings.TrimPrefix(s, "error: "))
			}
			// The shim is gone once it said ok; wait for its record.
			return nil
		}
		if _, err := os.Stat(i.dir()); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: sandbox %s ended during its pause", sberr.ErrNotFound, i.id)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pause sandbox %s: %w (the pause goes on: Info says whether it is paused or running)", i.id, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Resume restores a paused sandbox under the same id.
func (i *instance) Resume(ctx context.Context) error {
	r, err := i.record()
	if err != nil {
		return err
	}
	if r, err = i.waitPausing(ctx, r); err != nil {
		return err
	}
	r.Pausing = false
	if !r.Paused {
		if r.alive() {
			return nil
		}
		return fmt.Errorf("sandbox %s: %w (it expired or was killed)", i.id, sberr.ErrNotFound)
	}
	// The runsc found now, not a path from the record.
	runsc, err := checkGVisor()
	if err != nil {
		return fmt.Errorf("resume sandbox %s: %w", i.id, err)
	}
	exe, err := sandboxBinary(ctx, "")
	if err != nil {
		return err
	}
	if err := checkRoom(); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", i.id, err) // it stays paused
	}
	ss := shimSpec{Dir: i.dir(), Record: *r, Runsc: runsc, Exe: exe, Restore: true}
	if err := startShim(ctx, exe, ss); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", i.id, err)
	}
	if err := i.waitHealthy(ctx, 30*time.Second); err != nil {
		return err
	}
	return i.afterResume(ctx, r)
}

// startShim starts a supervisor for ss and waits for its report.
func startShim(ctx context.Context, exe string, ss shimSpec) error {
	b, err := json.Marshal(ss)
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	cmd, err := execShim(exe, filepath.Base(ss.Dir), append(shimEnv(), shimSpecEnv+"="+string(b)), []*os.File{readyW})
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start sandbox supervisor: %w", err)
	}
	if ss.Restore && ss.Image == "" {
		return waitRestore(ctx, cmd.Process.Pid, ss, readyR)
	}
	rep, err := readReport(ctx, readyR)
	if err != nil || !rep.OK {
		// A fork: its supervisor may have restored the sandbox already
		// (launch's stopSupervisor says why not to kill it outright); a
		// restore may take up to its checkpoint bound.
		stopSupervisor(cmd, ss.Dir, max(stopGrace, checkpointBound(ss.Record.Memory)))
		if err == nil {
			err = errors.New(rep.Error)
		}
		return fmt.Errorf("%w: %w", errSupervisorStopping, err)
	}
	return nil
}

// errSupervisorStopping: startShim's supervisor failed or was given up and
// is being stopped; it removes the sandbox's directory once it is gone.
var errSupervisorStopping = errors.New("the sandbox supervisor is being stopped")

// Pauser is implemented by handles whose sandbox can pause.
var _ driver.Pauser = (*instance)(nil)

// tellAgent asks the agent for a step of the pause handshake: the request
// in its control directory (ctragent.RequestFile: a signal without one is
// ignored), then the signal.
func (g *gvisorSandbox) tellAgent(ctl, what, sig string) error {
	f := filepath.Join(ctl, ctragent.RequestFile)
	if err := os.WriteFile(f, []byte(what), 0o600); err != nil {
		return err
	}
	if err := os.Chown(f, ctlOwner(ctl), isolate.SandboxGID); err != nil {
		return err
	}
	if out, err := g.runscBounded(runscShortWait, nil, "kill", g.id, sig); err != nil {
		return fmt.Errorf("runsc kill %s: %w: %s", sig, err, strings.TrimSpace(string(out)))
	}
	return nil
}
