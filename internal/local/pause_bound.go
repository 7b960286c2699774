package local

// Time bounds on what a pause or resume runs (issue 16): runsc checkpoint
// once hung for minutes, and a caller must never hang with it.
//   - runsc checkpoint and restore get checkpointBound: 60 s plus 30 s per
//     GiB of the sandbox's memory limit (a checkpoint writes, a restore
//     reads, at most that much memory; the measured rate is about 4 s per
//     GiB on this machine's disk, loaded);
//   - every other runsc command of the handshake (kill, delete) gets
//     runscShortWait;
//   - a checkpoint past its bound is abandoned: runsc is killed, the partial
//     image removed, and the agent told to listen again; if it doesn't
//     within relistenWait the sandbox is ended and the pause says why;
//   - a restore past its bound is abandoned the same way: runsc is killed,
//     the half-restored gVisor sandbox deleted, and the sandbox stays paused
//     with its checkpoint;
//   - the caller waits at most the bound plus callerMargin for the
//     supervisor's answer.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/ctragent"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

const (
	// checkpointTimeoutEnv overrides checkpointBound (a Go duration): for
	// a host with a slow disk, and for the tests' injected hangs.
	checkpointTimeoutEnv = "CODE_SANDBOXES_CHECKPOINT_TIMEOUT"
	checkpointBase       = 60 * time.Second
	checkpointPerGiB     = 30 * time.Second
	runscShortWait       = 30 * time.Second
	relistenWait         = 10 * time.Second
	callerMargin         = 2 * time.Minute
	// resumeLock, in the sandbox directory, is held by the supervisor
	// restoring it: a second Resume while one is under way is refused.
	resumeLock = "resume.lock"
)

// checkpointBound bounds one runsc checkpoint or restore of a sandbox
// whose memory limit is mem bytes (0 or less: unlimited, the host's).
func checkpointBound(mem int64) time.Duration {
	if v := os.Getenv(checkpointTimeoutEnv); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	if mem <= 0 {
		if total, ok := totalRAM(); ok {
			mem = total
		}
		mem = max(mem, 16<<30)
	}
	gib := (mem + 1<<30 - 1) >> 30
	return checkpointBase + time.Duration(gib)*checkpointPerGiB
}

// pauseWaitFor is how long a caller waits for its sandbox's pause: the
// quiesce, the checkpoint's bound and what an abandoned one does after.
func pauseWaitFor(mem int64) time.Duration {
	return quiesceWait + checkpointBound(mem) + callerMargin
}

// errRunscTimeout is a runsc command that did not finish within its bound.
var errRunscTimeout = errors.New("runsc did not finish in time")

// runscBounded runs a runsc command of this sandbox for at most d; past it
// runsc and everything it started in its process group are killed. out
// receives its output (nil: kept, up to 64 KiB, and returned).
func (g *gvisorSandbox) runscBounded(d time.Duration, out io.Writer, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	a := append([]string{"--root", g.root}, g.flags...)
	cmd := exec.CommandContext(ctx, g.runsc, append(a, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	// Its own process group, so that what it started goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A child that kept runsc's output open must not hold Wait.
	cmd.WaitDelay = 5 * time.Second
	var buf capped
	if out == nil {
		buf.left = 64 << 10
		out = &buf
	}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	if ctx.Err() != nil {
		return buf.b, fmt.Errorf("%w: %w: runsc %s took longer than %s and was abandoned", sberr.ErrTimeout, errRunscTimeout, args[0], d)
	}
	return buf.b, err
}

// capped keeps the first left bytes written to it.
type capped struct {
	b    []byte
	left int
}

func (c *capped) Write(p []byte) (int, error) {
	n := min(len(p), c.left)
	c.b = append(c.b, p[:n]...)
	c.left -= n
	return len(p), nil
}

// relisten asks the agent to listen again after an abandoned or failed
// checkpoint and reports whether it did (it removes its quiesced marker,
// then binds its socket) within relistenWait.
func (g *gvisorSandbox) relisten(ctl, marker string) bool {
	// The old socket is root's (the agent bound it first as uid 0), and
	// the agent, the sandbox user by now, can't remove it to bind again.
	_ = os.Remove(filepath.Join(ctl, ctragent.SocketFile))
	if err := g.tellAgent(ctl, "resume", "USR1"); err != nil {
		return false
	}
	deadline := time.Now().Add(relistenWait)
	for time.Now().Before(deadline) {
		_, merr := os.Stat(marker)
		if _, err := os.Stat(filepath.Join(ctl, ctragent.SocketFile)); err == nil && errors.Is(merr, os.ErrNotExist) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// checkpointFailed is what the supervisor does after a failed or abandoned
// runsc checkpoint: the partial image removed, the sandbox running again
// if it can, else ended with the reason written where the caller reads it
// first (the sandbox directory goes with the sandbox).
func (g *gvisorSandbox) checkpointFailed(dir, ctl, marker, img string, cause error) error {
	_ = os.RemoveAll(img)
	if g.relisten(ctl, marker) {
		return fmt.Errorf("%w; the sandbox keeps running", cause)
	}
	err := fmt.Errorf("%w; the sandbox did not serve again afterwards and was ended", cause)
	_ = os.WriteFile(filepath.Join(dir, pauseResult), []byte("error: "+err.Error()), 0o600)
	_ = g.Kill()
	return err
}

// lockResume takes the sandbox's resume lock for as long as this process
// lives (the supervisor's whole life: nothing else may restore it), or
// says that another resume holds it.
func lockResume(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, resumeLock), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: another resume of this sandbox is under way", sberr.ErrAlreadyExists)
	}
	return f, nil
}

// awaitResumeUnlocked waits, at most max, until no process holds dir's
// resume lock.
func awaitResumeUnlocked(dir string, max time.Duration) {
	deadline := time.Now().Add(max)
	for {
		f, err := lockResume(dir)
		if err == nil {
			f.Close()
			return
		}
		if !errors.Is(err, sberr.ErrAlreadyExists) || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// abandonRestore ends a supervisor that did not answer within its bound,
// and the half-restored gVisor sandbox it may have left: the sandbox stays
// paused with its checkpoint.
func abandonRestore(pid int, ss shimSpec) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(context.Background(), runscShortWait)
	defer cancel()
	cleanupGVisor(ctx, ss.Dir, &ss.Record)
}

// waitRestore waits for the report of a supervisor restoring a paused
// sandbox, at most the restore's bound plus callerMargin: past it the
// supervisor and what it restored are ended, and the sandbox stays paused.
// If ctx ends first the restore goes on and the caller is told so (ending
// the supervisor mid-restore could leave a half-restored sandbox).
func waitRestore(ctx context.Context, pid int, ss shimSpec, ready io.Reader) error {
	bound := checkpointBound(ss.Record.Memory) + callerMargin
	type res struct {
		rep shimReport
		err error
	}
	ch := make(chan res, 1)
	go func() {
		rep, err := readReport(context.Background(), ready)
		ch <- res{rep, err}
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.err == nil && !r.rep.OK {
			r.err = errors.New(r.rep.Error)
		}
		if r.err != nil {
			// The supervisor reports before it exits, and its resume lock
			// goes with it: wait for that (bounded), so that a Resume right
			// after this answer isn't refused as one under way (CI saw it).
			awaitResumeUnlocked(ss.Dir, runscShortWait)
			return fmt.Errorf("%w (it stays paused)", r.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w (the resume goes on in the sandbox's supervisor: Info says whether it is paused or running)", ctx.Err())
	case <-t.C:
		abandonRestore(pid, ss)
		return fmt.Errorf("%w: the sandbox's supervisor did not finish its restore within %s and was ended (it stays paused)", sberr.ErrTimeout, bound)
	}
}

// ctlOwner is the uid the agent reads its control directory as: the
// directory's owner (the agent's own uid; the sandbox user's in sandboxes
// made before the agent had one).
func ctlOwner(ctl string) int {
	var st syscall.Stat_t
	if err := syscall.Stat(ctl, &st); err != nil {
		return gvisorAgentUID
	}
	return int(st.Uid)
}
