// One sandbox's endpoints: finding the caller's own sandbox, and get, kill,
// timeout, refresh, connect and resume.

package e2bserver

import (
	"context"
	"errors"
	"net/http"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken     string       `json:"envdAccessToken,omitempty"`
	AllowInternetAccess bool         `json:"allowInternetAccess"`
	Network             *networkInfo `json:"network,omitempty"`
	Domain              *string      `json:"domain"`
	Lifecycle           struct {
		AutoResume bool   `json:"autoResume"`
		OnTimeout  string `json:"onTimeout"`
	} `json:"lifecycle"`
}

// ours lists the team's live sandboxes. It also forgets held sandboxes that
// ended by themselves (their timeout).
func (s *Server) ours(ctx context.Context, team string) ([]sandboxes.Info, error) {
	// Only ids held before the listing may be pruned: one created while it
	// runs is missing from it without being gone.
	held := s.Created()
	resumes := s.resumeCounts()
	infos, err := sandboxes.List(ctx, s.cfg, sandboxes.ListOptions{Tags: map[string]string{}})
	if err != nil {
		return nil, err
	}
	var out []sandboxes.Info
	live := map[string]bool{}
	for _, i := range infos {
		if _, ok := i.Tags[tagTemplate]; ok && (i.Status == "running" || i.Status == sandboxes.StatusPaused) {
			live[i.ID] = true
			if r, ok := resumes[i.ID]; ok && i.Status == sandboxes.StatusPaused {
				s.notePaused(i.ID, r)
			}
			if s.lookup(i.ID, team) != nil {
				out = append(out, i)
			}
		}
	}
	for _, id := range held {
		if !live[id] {
			if e := s.lookup(id, ""); e != nil {
				s.log.Info("ended", "sandbox", id, "team", e.team, "by", "timeout")
			}
			s.forget(id)
		}
	}
	return out, nil
}

// find resolves the {id} of the path to a sandbox of the caller's team,
// answering 404 itself when there is none: another team's sandbox answers
// exactly as one that does not exist.
func (s *Server) find(w http.ResponseWriter, r *http.Request) (*entry, sandboxes.Info, bool) {
	return s.findAs(w, r, false)
}

// findAs is find; with pausedToo a paused sandbox is found too (details,
// pause, resume). One Info decides: asked twice, a sandbox that autoPause
// paused in between was "not paused" to the first question and answered
// 409 by the second (TestAutoPausedRefusesTraffic, under CI's load).
func (s *Server) findAs(w http.ResponseWriter, r *http.Request, pausedToo bool) (*entry, sandboxes.Info, bool) {
	id := r.PathValue("id")
	if e := s.lookup(id, caller(r).Team); e != nil {
		var resumes int
		if pausedToo {
			resumes = s.resumeCount(e)
		}
		i, err := e.inst.Info(r.Context())
		if err == nil && i.Status == "running" {
			return e, i, true
		}
		if err == nil && i.Status == sandboxes.StatusPaused && pausedToo {
			s.notePaused(e.id, resumes) // autoPause pauses it without serve
			return e, i, true
		}
		if err == nil && i.Status == sandboxes.StatusPaused {
			// Kept: a paused sandbox is not gone.
			writeError(w, http.StatusConflict, "sandbox %q is paused; resume it first (POST /sandboxes/%s/connect or /resume)", id, id)
			return nil, sandboxes.Info{}, false
		}
		if errors.Is(err, sandboxes.ErrUnavailable) {
			// Possibly passing (the engine or API server not answering): the
			// sandbox may still run, so it keeps counting against its team's
			// quota; the janitor's listing forgets it once it is really gone.
			writeError(w, http.StatusServiceUnavailable, "sandbox %s is not answering right now; try again: %v", id, err)
			return nil, sandboxes.Info{}, false
		}
		if err != nil && !errors.Is(err, sandboxes.ErrNotFound) {
			writeError(w, http.StatusInternalServerError, "reading sandbox %s: %v", id, err)
			return nil, sandboxes.Info{}, false
		}
		s.forget(id)
	}
	writeError(w, http.StatusNotFound, "sandbox %q not found", id)
	return nil, sandboxes.Info{}, false
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	e, i, ok := s.findPausable(w, r) // a paused sandbox has details (state paused)
	if !ok {
		return
	}
	d := sandboxDetail{listedSandbox: listed(i), AllowInternetAccess: i.Network == sandboxes.NetworkAll, EnvdAccessToken: e.envdToken()}
	d.VolumeMounts = s.mountsOfTags(e.team, i.Tags)
	if st := e.net.Load(); st != nil {
		// What this server was asked (a restart forgets it: then only
		// allowInternetAccess, from the sandbox's policy).
		d.AllowInternetAccess = st.internet
		d.Network = &networkInfo{AllowOut: st.allowOut, DenyOut: st.denyOut, AllowPublicTraffic: !e.private, MaskRequestHost: st.mask}
	}
	d.Lifecycle.OnTimeout, d.Lifecycle.AutoResume = lifecycleOfInfo(i)
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	e, _, ok := s.findPausable(w, r) // killing a paused sandbox removes its checkpoint
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	defer cancel()
	k := caller(r)
	if err := e.inst.Kill(ctx); err != nil && !errors.Is(err, sandboxes.ErrNotFound) {
		s.log.Error("kill failed", "sandbox", e.id, "team", k.Team, "key", keyID(k.Key), "error", err)
		writeError(w, http.StatusInternalServerError, "killing sandbox %s: %v", e.id, err)
		return
	}
	s.forget(e.id)
	s.metrics.kills.WithLabelValues(k.Team).Inc()
	s.log.Info("killed", "sandbox", e.id, "team", k.Team, "key", keyID(k.Key))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) writeExtendError(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, sandboxes.ErrNotFound) || errors.Is(err, sandboxes.ErrUnavailable) {
		s.forget(id)
		writeError(w, http.StatusNotFound, "sandbox %q not found", id)
		return
	}
	writeError(w, http.StatusInternalServerError, "setting the timeout of sandbox %s: %v", id, err)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	e, _, ok := s.find(w, r)
	if !ok {
		return
	}
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if !decode(w, r, &req, false) {
		return
	}
	if req.Timeout == nil {
		writeError(w, http.StatusBadRequest, "timeout (seconds) is required")
		return
	}
	s.applyTimeout(w, r, e, *req.Timeout)
}

// applyTimeout sets a sandbox's lifetime to end secs from now and answers
// 204 (or the refusal).
func (s *Server) applyTimeout(w http.ResponseWriter, r *http.Request, e *entry, secs int64) {
	d, ok := s.timeout(w, secs)
	if !ok {
		return
	}
	err := e.inst.SetTimeout(r.Context(), d)
	e.forgetRunning() // its end moved: what serve knew ended at the old one
	if err != nil {
		s.writeExtendError(w, e.id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refresh is the deprecated POST /sandboxes/{id}/refreshes {"duration": s}.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	e, _, ok := s.find(w, r)
	if !ok {
		return
	}
	var req struct {
		Duration *int64 `json:"duration"`
	}
	if !decode(w, r, &req, true) {
		return
	}
	secs := int64(60) // the spec's default duration
	if req.Duration != nil {
		secs = *req.Duration
	}
	s.applyTimeout(w, r, e, secs)
}

// connect answers the Sandbox of a running sandbox (200); like E2B, a timeout
// only ever extends the sandbox's life, never shortens it.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	e, i, ok := s.findPausable(w, r)
	if !ok {
		return
	}
	status := http.StatusOK
	if i.Status == sandboxes.StatusPaused {
		// E2B: connect resumes a paused sandbox, and says so with 201.
		if !s.resumeEntry(w, r, e) {
			return
		}
		var err error
		if i, err = e.inst.Info(r.Context()); err != nil {
			s.writeExtendError(w, e.id, err)
			return
		}
		status = http.StatusCreated
	}
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if !decode(w, r, &req, true) {
		return
	}
	if req.Timeout != nil {
		d, ok := s.timeout(w, *req.Timeout)
		if !ok {
			return
		}
		if time.Now().Add(d).After(i.EndAt) {
			err := e.inst.SetTimeout(r.Context(), d)
			e.forgetRunning() // its end moved: what serve knew ended at the old one
			if err != nil {
				s.writeExtendError(w, e.id, err)
				return
			}
		}
	}
	k := caller(r)
	s.log.Info("connected", "sandbox", e.id, "team", k.Team, "key", keyID(k.Key))
	writeJSON(w, status, s.sandboxJSON(e))
}

// resume (deprecated in E2B for connect) resumes a paused sandbox: 201
// and its Sandbox; 409 if it runs.
func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	e, i, ok := s.findPausable(w, r)
	if !ok {
		return
	}
	if i.Status != sandboxes.StatusPaused {
		writeError(w, http.StatusConflict, "sandbox %q is already running", e.id)
		return
	}
	if !s.resumeEntry(w, r, e) {
		return
	}
	writeJSON(w, http.StatusCreated, s.sandboxJSON(e))
}
