// A build's log as the SDK reads it: the log itself, its progress summary,
// and the build status and logs endpoints.

package e2bserver

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// buildLog is a build's log as E2B's status endpoint pages it.
type buildLog struct {
	mu      sync.Mutex
	entries []logEntry
	partial []byte
	cut     bool
}

type logEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

func (l *buildLog) add(level, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addLocked(level, msg)
}

func (l *buildLog) addLocked(level, msg string) {
	if len(l.entries) >= maxLogEntries {
		if !l.cut {
			l.cut = true
			l.entries = append(l.entries, logEntry{time.Now().UTC(), "warn", "log truncated: the full log is in the server's environment store", ""})
		}
		return
	}
	if len(msg) > maxLogLine {
		msg = msg[:maxLogLine] + "…"
	}
	l.entries = append(l.entries, logEntry{time.Now().UTC(), level, msg, ""})
}

// Write splits the builder's output into entries, one per line.
func (l *buildLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := strings.IndexByte(string(l.partial), '\n')
		if i < 0 {
			if len(l.partial) > maxLogLine { // a very long line: cut it
				l.addLocked("info", string(l.partial))
				l.partial = l.partial[:0]
			}
			return len(p), nil
		}
		line := strings.TrimRight(string(l.partial[:i]), "\r")
		l.partial = l.partial[i+1:]
		if strings.TrimSpace(line) != "" {
			l.addLocked("info", line)
		}
	}
}

// progressSummary passes on the builder's progress lines but its step
// lines ("  [2/5] …", "    step 1: …"), which the full log already has.
type progressSummary struct{ l *buildLog }

func (p progressSummary) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if t := strings.TrimLeft(line, " "); t != "" && !strings.HasPrefix(t, "[") && !strings.HasPrefix(t, "step ") {
			_, _ = p.l.Write([]byte(line))
		}
	}
	return len(b), nil
}

func (l *buildLog) page(offset int) []logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset < 0 || offset >= len(l.entries) {
		return []logEntry{}
	}
	end := min(offset+logPage, len(l.entries))
	return slices.Clone(l.entries[offset:end])
}

func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request) {
	tp, _, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	offset, _ := strconv.Atoi(r.URL.Query().Get("logsOffset"))
	s.templates.mu.Lock()
	b := tp.build(r.PathValue("buildID"))
	if b == nil {
		s.templates.mu.Unlock()
		writeError(w, http.StatusNotFound, "build %q of template %s not found", r.PathValue("buildID"), tp.ID)
		return
	}
	status, reason, step, logs := b.Status, b.Reason, b.Step, b.logs
	s.templates.mu.Unlock()
	entries := []logEntry{}
	if logs != nil { // nil for a build from before a restart: its log is in the store
		entries = logs.page(offset)
	}
	lines := make([]string, 0, len(entries))
	for _, e := range entries {
		lines = append(lines, e.Timestamp.Format(time.RFC3339)+" "+e.Message)
	}
	out := map[string]any{"templateID": tp.ID, "buildID": b.ID, "status": status, "logEntries": entries, "logs": lines}
	if status == "error" {
		out["reason"] = map[string]any{"message": reason, "step": step, "logEntries": []logEntry{}}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) buildLogs(w http.ResponseWriter, r *http.Request) {
	tp, _, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	offset, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	s.templates.mu.Lock()
	b := tp.build(r.PathValue("buildID"))
	s.templates.mu.Unlock()
	if b == nil {
		writeError(w, http.StatusNotFound, "build %q of template %s not found", r.PathValue("buildID"), tp.ID)
		return
	}
	entries := []logEntry{}
	if b.logs != nil {
		entries = b.logs.page(offset)
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": entries})
}
