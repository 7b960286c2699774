package e2bserver

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/tail"
)

// A template's start command (setStartCmd) runs in the background in every
// sandbox made from it, as the sandbox's user; the sandbox is handed out
// once the ready command (setReadyCmd) exits 0. Both go through the
// sandbox's own process API, so they run exactly as a client's command
// would: inside the sandbox, with its limits, never on the host.
const (
	// readyTimeout bounds the wait for the ready command: create fails
	// after it, and the sandbox is removed.
	readyTimeout = 60 * time.Second
	// Bounds of a sandbox's log (the start command's output).
	maxSandboxLogEntries = 1000
	maxSandboxLogLine    = 4 << 10
)

// sandboxLog is a sandbox's log as E2B's logs endpoints serve it: the
// start command's output lines, bounded (the oldest go first).
type sandboxLog struct {
	mu      sync.Mutex
	entries []sandboxLogEntry
	partial map[string][]byte // per stream, a line not ended yet
}

type sandboxLogEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

func (l *sandboxLog) add(level, stream, msg string) {
	if len(msg) > maxSandboxLogLine {
		msg = msg[:maxSandboxLogLine] + "…"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) >= maxSandboxLogEntries {
		l.entries = append(l.entries[:0], l.entries[1:]...)
	}
	l.entries = append(l.entries, sandboxLogEntry{Timestamp: time.Now().UTC(), Level: level, Message: msg,
		Fields: map[string]string{"source": "start command", "stream": stream}})
}

// writer splits a stream's chunks into log lines.
func (l *sandboxLog) writer(stream string) func([]byte) {
	return func(p []byte) {
		l.mu.Lock()
		if l.partial == nil {
			l.partial = map[string][]byte{}
		}
		buf := append(l.partial[stream], p...)
		var lines []string
		for {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			lines = append(lines, string(buf[:i]))
			buf = buf[i+1:]
		}
		if len(buf) > maxSandboxLogLine { // a line that never ends: cut it
			lines = append(lines, string(buf))
			buf = nil
		}
		l.partial[stream] = append([]byte(nil), buf...)
		l.mu.Unlock()
		level := "info"
		if stream == "stderr" {
			level = "warn"
		}
		for _, line := range lines {
			l.add(level, stream, line)
		}
	}
}

// since returns up to limit entries at or after start.
func (l *sandboxLog) since(start time.Time, limit int) []sandboxLogEntry {
	if l == nil {
		return []sandboxLogEntry{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []sandboxLogEntry{}
	for _, e := range l.entries {
		if !e.Timestamp.Before(start) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out
}

// launchTemplate runs the template's start command and waits for its
// ready command. An error means the sandbox must not be handed out (the
// caller removes it).
func launchTemplate(ctx context.Context, sb *sandboxes.Sandbox, l launch, log *sandboxLog) error {
	exited := make(chan string, 1)
	if l.start != "" {
		h, err := sb.Commands().Start(ctx, l.start, sandboxes.CommandTag("template-start"),
			sandboxes.OnCommandStdout(log.writer("stdout")), sandboxes.OnCommandStderr(log.writer("stderr")))
		if err != nil {
			return fmt.Errorf("the template's start command could not start: %w", err)
		}
		go func() {
			r, err := h.Wait()
			msg := "start command exited"
			switch {
			case err != nil:
				msg += ": " + err.Error()
			case r.ExitCode != 0:
				msg += " with code " + strconv.Itoa(r.ExitCode) + ": " + tail.Lines(r.Stdout+r.Stderr, 5)
			}
			log.add("info", "system", msg)
			if err != nil || r.ExitCode != 0 {
				exited <- msg
			}
		}()
	}
	if l.ready == "" {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	last := ""
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		// One run may take the whole budget (the SDK's waitForTimeout is a
		// sleep of its own).
		r, err := sb.Commands().Run(rctx, l.ready)
		switch {
		case err == nil && r.ExitCode == 0:
			log.add("info", "system", "ready command succeeded")
			return nil
		case err != nil:
			last = err.Error()
		default:
			last = "exit code " + strconv.Itoa(r.ExitCode) + ": " + tail.Lines(r.Stdout+r.Stderr, 5)
		}
		select {
		case msg := <-exited:
			return fmt.Errorf("the template's %s before its ready command (%q) succeeded (last try: %s)", msg, l.ready, last)
		case <-rctx.Done():
			return fmt.Errorf("the template's ready command (%q) did not succeed within %s (last try: %s); the sandbox was removed", l.ready, readyTimeout, last)
		case <-time.After(wait):
		}
	}
}

// sandboxLogs answers E2B's GET /sandboxes/{id}/logs (v1: logs and
// logEntries, start in ms) and /v2/sandboxes/{id}/logs (logs as entries,
// cursor in ms).
func (s *Server) sandboxLogs(w http.ResponseWriter, r *http.Request) {
	e, _, ok := s.find(w, r)
	if !ok {
		return
	}
	v2 := strings.HasPrefix(r.URL.Path, "/v2/")
	q := r.URL.Query()
	from := q.Get("start")
	if v2 {
		from = q.Get("cursor")
	}
	var start time.Time
	if from != "" {
		ms, err := strconv.ParseInt(from, 10, 64)
		if err != nil || ms < 0 {
			writeError(w, http.StatusBadRequest, "start/cursor: milliseconds since the epoch")
			return
		}
		start = time.UnixMilli(ms)
	}
	limit := 1000
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			writeError(w, http.StatusBadRequest, "limit: 0 to 1000")
			return
		}
		limit = n
	}
	entries := e.logs.since(start, limit)
	if v2 {
		writeJSON(w, http.StatusOK, map[string]any{"logs": entries})
		return
	}
	lines := make([]map[string]any, 0, len(entries))
	for _, en := range entries {
		lines = append(lines, map[string]any{"timestamp": en.Timestamp, "line": en.Message})
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": lines, "logEntries": entries})
}
