package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/kernel"
	"github.com/code-sandboxes/code-sandboxes/internal/secs"
)

// maxCodeBytes bounds the request body of /execute; code cells beyond this are
// almost certainly a mistake, and we never read an unbounded body.
const maxCodeBytes = 8 << 20

// keepaliveEvery matches E2B's server: a keepalive line after 5 s of silence,
// which also lets the server notice a client that went away.
var keepaliveEvery = 5 * time.Second

type executeRequest struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
	// Timeout is our extension (seconds); E2B's server has none and its SDKs
	// never send it.
	Timeout float64 `json:"timeout,omitempty"`
}

// mimeFields is E2B's MIME type -> result field mapping (api/models/result.py).
var mimeFields = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

func stripQuotes(s string) string {
	if len(s) >= 2 && (s[0] == '\'' && s[len(s)-1] == '\'' || s[0] == '"' && s[len(s)-1] == '"') {
		return s[1 : len(s)-1]
	}
	return s
}

// resultLine maps a MIME bundle to E2B's result line. Values the kernel
// produced as JSON objects stay objects; everything else is a string.
func resultLine(data map[string]json.RawMessage, main bool) ordered {
	line := ordered{{"type", "result"}}
	extra := map[string]any{}
	mimes := make([]string, 0, len(data))
	for mime := range data {
		mimes = append(mimes, mime)
	}
	sort.Strings(mimes)
	for _, mime := range mimes {
		raw := data[mime]
		field, known := mimeFields[mime]
		var v any = raw
		var s string
		if json.Unmarshal(raw, &s) == nil {
			v = s
			if field == "text" {
				v = stripQuotes(s)
			}
		}
		if known {
			line = append(line, kv{field, v})
		} else {
			extra[mime] = v
		}
	}
	return append(line, kv{"extra", extra}, kv{"is_main_result", main})
}

func textError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

func (s *Server) handleExecute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	body := http.MaxBytesReader(w, r.Body, maxCodeBytes)
	if err := json.NewDecoder(body).Decode(&req); err != nil {
		textError(w, http.StatusBadRequest, badExecuteRequest(err))
		return
	}
	cc, status, msg := s.executionContext(&req)
	if status != 0 {
		textError(w, status, msg)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	lw := newLineWriter(w, rc.Flush, rc.SetWriteDeadline)
	defer lw.close()
	// The headers go out soon, not with the first line (which may be a long
	// time coming): a client whose sandbox dies mid-run then sees a response
	// in progress cut off, which E2B's SDKs report as "killed while the
	// request was in progress", rather than a request that never answered.
	// Not at once: a cell that ends within headerFlushDelay (most do) then
	// answers in one write, headers and all lines, and the client wakes once.
	lw.flushHeadersAfter(headerFlushDelay)
	// A client that disconnects interrupts its execution, as E2B's server
	// does. The interrupt is scoped to this execution: the disconnect
	// notice can arrive after it ended, when another request's cell is
	// running.
	s.execute(cc, req, lw, r.Context().Done())
	// Not flushed here: the handler's return flushes it together with the
	// end of the chunked body, in one write.
	lw.writeFlush(ordered{{"type", "end_of_execution"}}, false)
	s.touch()
}

func badExecuteRequest(err error) string {
	return "invalid execution request: " + err.Error() + `; send JSON {"code": "...", "context_id"?: "...", "language"?: "...", "env_vars"?: {...}}`
}

// executionContext checks req and finds the context it runs in; a non-zero
// status is a refusal, with its message.
func (s *Server) executionContext(req *executeRequest) (*codeContext, int, string) {
	if req.ContextID != nil && *req.ContextID != "" && req.Language != nil && *req.Language != "" {
		return nil, http.StatusBadRequest, "Only one of context_id or language can be provided"
	}
	if req.Timeout < 0 {
		return nil, http.StatusBadRequest, "timeout must be a positive number of seconds"
	}
	if req.ContextID != nil && *req.ContextID != "" {
		cc := s.contexts.get(*req.ContextID)
		if cc == nil {
			return nil, http.StatusNotFound, fmt.Sprintf("Context %s not found", *req.ContextID)
		}
		return cc, 0, ""
	}
	lang := ""
	if req.Language != nil {
		lang = *req.Language
	}
	cc, err := s.contexts.defaultFor(lang, s.cfg.Workdir)
	if errors.Is(err, errUnsupportedLanguage) {
		return nil, http.StatusBadRequest, err.Error()
	}
	if err != nil {
		return nil, http.StatusInternalServerError, err.Error()
	}
	return cc, 0, ""
}

// execute runs one cell in cc, writing its lines but the last
// (end_of_execution) to lw. A close of interrupt interrupts the cell, but
// the kernel still finishes cleanly so the context stays usable.
func (s *Server) execute(cc *codeContext, req executeRequest, lw *lineWriter, interrupt <-chan struct{}) {
	s.touch()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kreq := kernel.Request{Code: req.Code, EnvVars: req.EnvVars, Interrupt: interrupt}
	if req.Timeout > 0 {
		kreq.Timeout = secs.Duration(req.Timeout) // 1e300 is "very long", not an overflow
	}
	out, err := cc.session.Execute(ctx, kreq, func(ev kernel.Event) {
		// The execution count and the main result are always followed at
		// once by more lines (the result by end_of_execution): leave them in
		// the buffer and save a write per line. Everything else is flushed
		// so the client sees it live.
		lazy := ev.Type == kernel.EventNumberOfExecutions || ev.Type == kernel.EventResult && ev.IsMainResult
		lw.writeFlush(eventLine(ev), !lazy)
	})
	if err != nil {
		lw.write(errorLine("SandboxError", err.Error(), ""))
		return
	}
	// Our extensions: E2B's SDKs ignore line types they don't know.
	if out.ExitCode != nil {
		lw.write(ordered{{"type", "exit_code"}, {"exit_code", *out.ExitCode}})
	}
	if out.Interrupted || out.TimedOut || out.KernelDied {
		lw.write(ordered{{"type", "execution_status"}, {"interrupted", out.Interrupted}, {"timed_out", out.TimedOut}, {"kernel_died", out.KernelDied}})
	}
}

func errorLine(name, value, traceback string) ordered {
	return ordered{{"type", "error"}, {"name", name}, {"value", value}, {"traceback", traceback}}
}

func eventLine(ev kernel.Event) ordered {
	switch ev.Type {
	case "stdout", "stderr":
		ts := ev.Timestamp
		if ts.IsZero() {
			ts = time.Now()
		}
		return ordered{{"type", ev.Type}, {"text", ev.Text}, {"timestamp", ts.UTC().Format("2006-01-02T15:04:05.000000Z")}}
	case "result":
		return resultLine(ev.Data, ev.IsMainResult)
	case "error":
		return errorLine(ev.Name, ev.Value, ev.Traceback)
	case "number_of_executions":
		return ordered{{"type", "number_of_executions"}, {"execution_count", ev.ExecutionCount}}
	}
	return ordered{{"type", ev.Type}}
}

// lineWriter serialises NDJSON lines from the kernel callback and the
// keepalive ticker, flushing each so output is live.
type lineWriter struct {
	mu       sync.Mutex
	w        io.Writer
	flush    func() error
	deadline func(time.Time) error // of writes
	last     time.Time
	broken   bool
	flushed  bool        // the headers went out
	hdr      *time.Timer // flushHeadersAfter's
	ka       *time.Timer // the keepalive's
	done     chan struct{}
	every    time.Duration // keepaliveEvery when the stream started
}

// headerFlushDelay: how long /execute may hold its headers back, hoping to
// send them with the whole answer.
const headerFlushDelay = 2 * time.Millisecond

func newLineWriter(w io.Writer, flush func() error, deadline func(time.Time) error) *lineWriter {
	lw := &lineWriter{w: w, flush: flush, deadline: deadline, last: time.Now(), done: make(chan struct{}), every: keepaliveEvery}
	// A timer, not a goroutine with a ticker: most executions end long
	// before the first keepalive, and starting a goroutine per execution
	// wakes another thread of the runtime for nothing.
	lw.mu.Lock()
	lw.ka = time.AfterFunc(lw.every, lw.keepalive)
	lw.mu.Unlock()
	return lw
}

// keepalive runs when the stream may have been silent for lw.every: it
// writes a keepalive line if it was, and sets itself for the next check.
func (lw *lineWriter) keepalive() {
	select {
	case <-lw.done:
		return
	default:
	}
	lw.mu.Lock()
	idle := time.Since(lw.last)
	lw.mu.Unlock()
	if idle >= lw.every {
		lw.write(ordered{{"type", "keepalive"}})
		idle = 0
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	select {
	case <-lw.done:
	default:
		lw.ka.Reset(lw.every - idle)
	}
}

func (lw *lineWriter) write(v ordered) { lw.writeFlush(v, true) }

func (lw *lineWriter) writeFlush(v ordered, flush bool) {
	b, err := pyJSON(v)
	if err != nil {
		b, _ = pyJSON(errorLine("EncodingError", err.Error(), ""))
	}
	b = append(b, '\n')
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.last = time.Now()
	if lw.broken {
		return
	}
	// A client that stops reading must not hold the kernel forever.
	_ = lw.deadline(time.Now().Add(2 * time.Minute))
	if _, err := lw.w.Write(b); err != nil {
		lw.broken = true
		return
	}
	if !flush {
		return
	}
	lw.flushed = true
	if err := lw.flush(); err != nil {
		lw.broken = true
	}
}

func (lw *lineWriter) isBroken() bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.broken
}

// flushHeadersAfter sends the headers after d unless a flushing write (or
// the end of the response) sent them first.
func (lw *lineWriter) flushHeadersAfter(d time.Duration) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.hdr = time.AfterFunc(d, func() {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		if lw.broken || lw.flushed {
			return
		}
		lw.flushed = true
		_ = lw.deadline(time.Now().Add(2 * time.Minute))
		if err := lw.flush(); err != nil {
			lw.broken = true
		}
	})
}

// close stops the keepalive and every later write: the handler returns
// right after, and net/http forbids writes past that point (the keepalive
// could be between its idle check and its write, or pick its tick over
// done). Taking the lock waits for a write in progress.
func (lw *lineWriter) close() {
	close(lw.done)
	lw.mu.Lock()
	lw.broken = true
	if lw.hdr != nil {
		lw.hdr.Stop()
	}
	lw.ka.Stop()
	lw.mu.Unlock()
}
