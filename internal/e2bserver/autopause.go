package e2bserver

// autoPause (E2B's create body autoPause, autoPauseMemory and autoResume;
// the JS SDK's lifecycle option): the sandbox is paused, not killed, when
// its timeout ends (sandboxes.Config.AutoPause), connect resumes it, and
// with autoResume a request to one of its ports through the data plane
// resumes it too.

import (
	"context"
	"errors"
	"net/http"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

const (
	tagOnTimeout  = tagPrefix + "on-timeout"  // "pause": autoPause
	tagAutoResume = tagPrefix + "auto-resume" // "true": traffic resumes it
)

// autoResumeReq is E2B's SandboxAutoResumeConfig.
type autoResumeReq struct {
	Enabled bool `json:"enabled"`
}

// lifecycleOf checks the create body's lifecycle fields against what this
// server can do (network is the sandbox's policy): whether the sandbox
// pauses at its timeout and whether traffic resumes it, or why not.
func (s *Server) lifecycleOf(req newSandbox, network string) (autoPause, autoResume bool, refusal string) {
	autoPause = req.AutoPause != nil && *req.AutoPause
	autoResume = req.AutoResume != nil && req.AutoResume.Enabled
	switch {
	case autoResume && !autoPause:
		return false, false, "autoResume needs autoPause (lifecycle onTimeout 'pause'): only a paused sandbox resumes"
	case !autoPause:
		return false, false, ""
	case req.AutoPauseMemory != nil && !*req.AutoPauseMemory:
		return false, false, "autoPauseMemory false (lifecycle onTimeout keepMemory: false, a filesystem-only pause) is not supported: a pause here always keeps the whole sandbox, memory and processes included; drop keepMemory"
	case s.cfg.Isolation != sandboxes.IsolationGVisor || sandboxes.NormalizeVariant(s.cfg.Variant) != "local":
		return false, false, "autoPause (lifecycle onTimeout 'pause') is not supported by this server: pausing needs the local variant with gVisor's checkpoint, so run serve with --isolation gvisor; here sandboxes are killed when their timeout ends"
	case network != sandboxes.NetworkNone:
		return false, false, "autoPause (lifecycle onTimeout 'pause') needs a sandbox without internet access (allowInternetAccess: false, or serve --network none): gVisor can't checkpoint the host sockets a sandbox with network uses"
	}
	return autoPause, autoResume, ""
}

// pausedNow reports whether e's sandbox says it is paused (or pausing).
func (s *Server) pausedNow(ctx context.Context, e *entry) bool {
	i, err := e.inst.Info(ctx)
	return err == nil && i.Status == sandboxes.StatusPaused
}

// wake resumes an autoResume sandbox that is paused, before a request to
// one of its ports goes through; it answers the error itself. One resume
// at a time per sandbox: the others wait for it.
func (s *Server) wake(w http.ResponseWriter, r *http.Request, e *entry) bool {
	i, err := e.inst.Info(r.Context())
	if err != nil || i.Status != sandboxes.StatusPaused {
		return true // running (or gone: the proxy says so)
	}
	e.resumeMu.Lock()
	defer e.resumeMu.Unlock()
	if i, err = e.inst.Info(r.Context()); err != nil || i.Status != sandboxes.StatusPaused {
		return true
	}
	// The request is not what ends a resume half-way.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	defer cancel()
	if err := s.resumeCounted(ctx, e); err != nil {
		if errors.Is(err, errQuota) {
			s.metrics.refused.WithLabelValues("quota").Inc()
			writeError(w, http.StatusTooManyRequests, "sandbox %s is paused and can't resume now: %v", e.id, err)
			return false
		}
		if errors.Is(err, sandboxes.ErrNotFound) {
			s.forget(e.id)
			sandboxGone(w, e.id)
			return false
		}
		s.log.Error("auto-resume failed", "sandbox", e.id, "team", e.team, "error", err)
		writeError(w, http.StatusServiceUnavailable, "sandbox %s is paused and resuming it failed: %v", e.id, err)
		return false
	}
	if e.tunnel != nil {
		e.tunnel.CloseIdleConnections()
	}
	s.log.Info("resumed by traffic", "sandbox", e.id, "team", e.team)
	return true
}

// lifecycleOfInfo is SandboxDetail's lifecycle of a sandbox.
func lifecycleOfInfo(i sandboxes.Info) (onTimeout string, autoResume bool) {
	if i.Tags[tagOnTimeout] == "pause" {
		return "pause", i.Tags[tagAutoResume] == "true"
	}
	return "kill", false
}
