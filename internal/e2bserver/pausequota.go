package e2bserver

// Paused sandboxes and the team quota. As on E2B, only running sandboxes
// count against a team's quota (sandboxes, total memory and CPU): a paused
// one holds no memory or CPU, only its checkpoint on disk. What bounds
// that is the team's paused slots (Options.MaxPaused): every paused
// sandbox holds one, and so does every sandbox that pauses at its timeout
// (autoPause), from its create on, since its pause can't be refused when
// the timeout comes. A resume counts the sandbox against the quota again
// first, and is refused (429) when the team is at it.
//
// Serve's view (entry.paused) errs toward counting a sandbox as running:
// it is set once a pause succeeded or a listing saw the sandbox paused
// (autoPause pauses it without serve), and cleared when a resume starts.

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// defaultMaxPaused is Options.MaxPaused's default.
const defaultMaxPaused = 20

func (s *Server) maxPausedPerTeam() int {
	if s.maxPaused > 0 {
		return s.maxPaused
	}
	return defaultMaxPaused
}

// pausedSlotsLocked counts the team's paused slots in use (s.mu held).
func (s *Server) pausedSlotsLocked(ts *teamState, team string) int {
	n := ts.pendingPaused
	for _, e := range s.sandboxes {
		if e.team == team && (e.paused || e.autoPause || e.resuming) {
			n++
		}
	}
	return n
}

// pausedCapError is the refusal of a pause (or an autoPause create) over
// the team's paused slots.
func (s *Server) pausedCapError(team string, n int) error {
	return fmt.Errorf("%w: team %s has %d paused sandboxes (counting those that pause at their timeout, autoPause), the most this server keeps per team (serve --max-paused); kill or resume one first", errQuota, team, n)
}

// runningLocked sums what the team's running sandboxes hold (s.mu held),
// creates in flight included, except skip's.
func (s *Server) runningLocked(ts *teamState, team string, skip *entry) (n int, mem int64, cpu float64) {
	n, mem, cpu = ts.pending, ts.pendingMem, ts.pendingCPU
	for _, e := range s.sandboxes {
		if e.team == team && e != skip && !e.paused {
			n++
			mem += e.memory
			cpu += e.cpus
		}
	}
	return n, mem, cpu
}

// quotaError checks one more running sandbox of mem and cpu against
// q, given what the team runs.
func quotaError(team string, q Quota, n int, mem int64, cpu float64, addMem int64, addCPU float64) error {
	switch {
	case q.Sandboxes > 0 && n+1 > q.Sandboxes:
		return fmt.Errorf("%w: team %s may run %d sandboxes at once; kill (or pause) one first", errQuota, team, q.Sandboxes)
	case q.TotalMemory > 0 && mem+addMem > q.TotalMemory:
		return fmt.Errorf("%w: team %s may use %d MiB of memory in all; %d MiB are in use", errQuota, team, q.TotalMemory>>20, mem>>20)
	case q.TotalCPU > 0 && cpu+addCPU > q.TotalCPU+1e-9:
		return fmt.Errorf("%w: team %s may use %g CPUs in all; %g are in use", errQuota, team, q.TotalCPU, cpu)
	}
	return nil
}

// pauseEntry pauses a sandbox if its team has a paused slot for it; it
// answers the error itself.
func (s *Server) pauseEntry(w http.ResponseWriter, r *http.Request, e *entry) bool {
	s.mu.Lock()
	ts := s.teams[e.team]
	holds := e.paused || e.autoPause || e.resuming
	if ts == nil {
		s.mu.Unlock()
		writeError(w, http.StatusTooManyRequests, "team %s has no key any more", e.team)
		return false
	}
	if !holds {
		if n := s.pausedSlotsLocked(ts, e.team); n >= s.maxPausedPerTeam() {
			s.mu.Unlock()
			s.metrics.refused.WithLabelValues("quota").Inc()
			writeError(w, http.StatusTooManyRequests, "%v", s.pausedCapError(e.team, n))
			return false
		}
		ts.pendingPaused++
	}
	s.mu.Unlock()
	e.forgetRunning()
	err := e.sb.Pause(r.Context())
	e.forgetRunning() // and again: a request may have looked while it began
	s.mu.Lock()
	if !holds {
		ts.pendingPaused--
	}
	if err == nil {
		e.paused = true
	}
	s.mu.Unlock()
	if err != nil {
		s.writePauseError(w, e, "pausing", err)
		return false
	}
	return true
}

// resumeCounted resumes a paused sandbox once its team's quota has room for it
// running again. A refusal wraps errQuota; a failed resume leaves the
// sandbox counted as running (it may be: a resume the caller gave up on
// goes on).
func (s *Server) resumeCounted(ctx context.Context, e *entry) error {
	if err := ceilingError(int(e.level.Load()), s.maxNetwork, maxNetworkFlag); err != nil {
		// A sandbox left by a server with a higher ceiling (adopted) does
		// not come back to life above this one's.
		return fmt.Errorf("sandbox %s stays paused: %w", e.id, err)
	}
	s.mu.Lock()
	ts := s.teams[e.team]
	if ts == nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: team %s has no key any more", errQuota, e.team)
	}
	n, mem, cpu := s.runningLocked(ts, e.team, e)
	if err := quotaError(e.team, ts.quota, n, mem, cpu, e.memory, e.cpus); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("sandbox %s stays paused: %w", e.id, err)
	}
	e.paused, e.resuming = false, true
	e.resumes++
	s.mu.Unlock()
	e.forgetRunning()
	err := e.sb.Resume(ctx)
	e.forgetRunning()
	s.mu.Lock()
	e.resuming = false
	if errors.Is(err, sandboxes.ErrNoRoom) {
		e.paused = true // refused before anything started: still paused
	}
	s.mu.Unlock()
	return err
}

// notePaused records that the sandbox was seen paused by a look (Info or
// a listing) taken when it had been resumed resumes times: a look older
// than a resume since says nothing about it.
func (s *Server) notePaused(id string, resumes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.sandboxes[id]; e != nil && !e.resuming && e.resumes == resumes {
		e.paused = true
	}
}

// resumeCount returns e's resumes (for notePaused).
func (s *Server) resumeCount(e *entry) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.resumes
}

// resumeCounts returns each held sandbox's resumes (for notePaused).
func (s *Server) resumeCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.sandboxes))
	for id, e := range s.sandboxes {
		m[id] = e.resumes
	}
	return m
}

// writeResumeError answers a refused or failed resume.
func (s *Server) writeResumeError(w http.ResponseWriter, e *entry, err error) {
	if errors.Is(err, errCeiling) {
		s.metrics.refused.WithLabelValues("network_ceiling").Inc()
		writeError(w, http.StatusForbidden, "%v", err)
		return
	}
	if errors.Is(err, errQuota) {
		s.metrics.refused.WithLabelValues("quota").Inc()
		writeError(w, http.StatusTooManyRequests, "%v", err)
		return
	}
	if errors.Is(err, sandboxes.ErrNoRoom) {
		s.writeNoRoom(w, "resuming sandbox "+e.id+" (it stays paused)", err)
		return
	}
	s.writePauseError(w, e, "resuming", err)
}
