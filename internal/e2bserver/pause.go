package e2bserver

import (
	"errors"
	"net/http"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// findPausable is find for the calls that also see paused sandboxes
// (pause, resume, connect, details, kill).
func (s *Server) findPausable(w http.ResponseWriter, r *http.Request) (*entry, sandboxes.Info, bool) {
	return s.findAs(w, r, true)
}

// pause is E2B's POST /sandboxes/{id}/pause: 204 once the sandbox is a
// checkpoint on disk, 409 if it already is; 501 with the reason where
// sandboxes can't pause (serve --isolation gvisor on the local variant
// can).
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	e, i, ok := s.findPausable(w, r)
	if !ok {
		return
	}
	var req struct {
		Memory *bool `json:"memory"` // SandboxPauseRequest
	}
	if !decode(w, r, &req, true) {
		return
	}
	if req.Memory != nil && !*req.Memory {
		writeError(w, http.StatusBadRequest, "memory false (keepMemory: false, a filesystem-only pause) is not supported: a pause here always keeps the whole sandbox, memory and processes included; drop keepMemory")
		return
	}
	if i.Status == sandboxes.StatusPaused {
		writeError(w, http.StatusConflict, "sandbox %q is already paused", e.id)
		return
	}
	if !s.pauseEntry(w, r, e) {
		return
	}
	if e.tunnel != nil {
		e.tunnel.CloseIdleConnections() // the agent closed them
	}
	k := caller(r)
	s.log.Info("paused", "sandbox", e.id, "team", k.Team, "key", keyID(k.Key))
	w.WriteHeader(http.StatusNoContent)
}

// resumeEntry resumes a paused sandbox; it answers the error itself.
func (s *Server) resumeEntry(w http.ResponseWriter, r *http.Request, e *entry) bool {
	if err := s.resumeCounted(r.Context(), e); err != nil {
		s.writeResumeError(w, e, err)
		return false
	}
	if e.tunnel != nil {
		e.tunnel.CloseIdleConnections()
	}
	k := caller(r)
	s.log.Info("resumed", "sandbox", e.id, "team", k.Team, "key", keyID(k.Key))
	return true
}

// writePauseError answers a failed pause, resume or snapshot (what:
// "pausing", "resuming", "snapshotting"): 501 with the reason where
// sandboxes can't pause, 404 (and the sandbox forgotten) when it is gone,
// else 500.
func (s *Server) writePauseError(w http.ResponseWriter, e *entry, what string, err error) {
	switch {
	case errors.Is(err, sandboxes.ErrNotSupported):
		writeError(w, http.StatusNotImplemented, "%s is not supported here: %v (run serve with --isolation gvisor on the local variant)", what, err)
	case errors.Is(err, sandboxes.ErrNotFound):
		s.forget(e.id)
		writeError(w, http.StatusNotFound, "sandbox %q not found", e.id)
	default:
		writeError(w, http.StatusInternalServerError, "%s sandbox %s: %v", what, e.id, err)
	}
}
