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

// runningMargin: what serve knows of a running sandbox holds until this
// long before its timeout's end, when its supervisor's pause may begin.
const runningMargin = 100 * time.Millisecond

// pausedNow reports whether e's sandbox is paused (or pausing). A sandbox
// seen running stays so until its timeout's end: only then does its
// supervisor pause it, and every other pause, resume and timeout change
// goes through this server, which forgets what it knew (forgetRunning).
// Until then a request reads nothing from disk (the local variant's Info
// reads the sandbox's record).
func (s *Server) pausedNow(ctx context.Context, e *entry) bool {
	if time.Now().UnixNano() < e.runningUntil.Load() {
		return false
	}
	s.stateReads.Add(1)
	i, err := e.inst.Info(ctx)
	if err != nil {
		return false // gone: the proxy says so
	}
	if i.Status == sandboxes.StatusPaused {
		return true
	}
	if i.Status == "running" && !i.EndAt.IsZero() {
		e.runningUntil.Store(i.EndAt.Add(-runningMargin).UnixNano())
	}
	return false
}

// forgetRunning drops what serve knew of e's running state: its next
// request reads the sandbox's record again. Called on every change this
// server makes (pause, resume, timeout) and when its agent did not answer
// (a pause by another process, e.g. the CLI's).
func (e *entry) forgetRunning() { e.runningUntil.Store(0) }

// isHealth: envd's unauthenticated health check.
func isHealth(r *http.Request, port int) bool {
	return (port == EnvdPort || port == InterpreterPort) && r.URL.Path == "/health" &&
		(r.Method == http.MethodGet || r.Method == http.MethodHead)
}

// wake resumes an autoResume sandbox that is paused, before a request to
// one of its ports goes through; it answers the error itself. One resume
// at a time per sandbox: the others wait for it. envd's /health needs no
// token, so it never resumes anything (a resume costs the sandbox's team):
// a paused sandbox's health is answered here, 502 paused, which the SDKs'
// isRunning reads as false.
func (s *Server) wake(w http.ResponseWriter, r *http.Request, e *entry, port int) bool {
	if !s.pausedNow(r.Context(), e) {
		return true // running (or gone: the proxy says so)
	}
	if isHealth(r, port) {
		writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": e.id, "code": http.StatusBadGateway,
			"message": "The sandbox is paused; /health does not resume it (connect, or any other request to it, does)"})
		return false
	}
	e.resumeMu.Lock()
	defer e.resumeMu.Unlock()
	if !s.pausedNow(r.Context(), e) {
		return true // resumed by the request this one waited for
	}
	// The request is not what ends a resume half-way.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	defer cancel()
	if err := s.resumeCounted(ctx, e); err != nil {
		if errors.Is(err, errCeiling) {
			s.metrics.refused.WithLabelValues("network_ceiling").Inc()
			writeError(w, http.StatusForbidden, "%v", err)
			return false
		}
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
