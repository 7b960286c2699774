package e2bserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
)

// leanHeaderDelay: as for the agent's /execute, the answer's headers wait
// this long for the first lines, so a quick cell goes out in one write; a
// slow one still shows the SDK a response in progress at once. Longer than
// the agent's own 2 ms: a refusal (an unknown context, a bad request) has
// its status only if its line arrives before the headers go, and here it
// comes over a round trip to the sandbox, which on a loaded host took more
// than 2 ms (CI answered an unknown context with a 200 and a cut stream).
const leanHeaderDelay = 25 * time.Millisecond

// maxLeanBody: bodies up to this size (nearly every cell) are read whole
// here and sent over the lean connection; a longer one goes through the
// plain proxy, which streams it to the agent (that reads it within the
// sandbox's own memory limit, up to 8 MiB). Serve holds at most this much
// of one request, whatever a tenant sends.
const maxLeanBody = 64 << 10

// executeLean answers an SDK's POST /execute over the agent's lean
// execution connection (docs/agent-protocol.md) instead of proxying it as
// HTTP: the same status, headers and NDJSON lines, without a second HTTP
// exchange per execution (an HTTP request to parse, chunked framing, the
// transport's goroutine hand-offs). The caller was authorized as for any
// request to the agent; the connection is the entry's own client's,
// authenticated with the sandbox's token. It reports false, having written
// nothing, when the plain proxy must answer (the agent has no lean
// connection, the body is too long).
func (p *dataPlane) executeLean(w http.ResponseWriter, r *http.Request, e *entry) bool {
	c := e.inst.Client()
	if c == nil || !c.LeanExecute() || r.ContentLength > maxLeanBody {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxLeanBody+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", mbe.Limit)
			return true
		}
		w.WriteHeader(499) // the client went away mid-body
		return true
	}
	if len(body) > maxLeanBody {
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		return false
	}
	start := time.Now()
	rc := http.NewResponseController(w)
	var mu sync.Mutex // the header timer and the lines
	sent, ended := false, false
	begin := func() {
		if !sent {
			sent = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
		}
	}
	hdr := time.AfterFunc(leanHeaderDelay, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended && !sent {
			begin()
			_ = rc.Flush()
		}
	})
	err = c.ExecuteRaw(r.Context(), body, func(line []byte, buffered int) {
		mu.Lock()
		defer mu.Unlock()
		begin()
		_, _ = w.Write(line)
		if buffered == 0 {
			_ = rc.Flush() // nothing more yet: what we have goes out live
		}
	})
	hdr.Stop()
	mu.Lock()
	ended = true // the timer, if it is waiting for mu, now does nothing
	mu.Unlock()
	if errors.Is(err, client.ErrNoLeanExecute) && !sent {
		r.Body = io.NopCloser(bytes.NewReader(body))
		return false
	}
	status := "200"
	var se *client.StatusError
	switch {
	case err == nil:
		begin()
		_, _ = io.WriteString(w, `{"type": "end_of_execution"}`+"\n")
	case errors.As(err, &se) && !sent:
		// What /execute answers for a refused request: the status, the
		// agent's message as text.
		status = strconv.Itoa(se.Status)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(se.Status)
		_, _ = io.WriteString(w, se.Message)
	case !sent:
		status = "error"
		p.proxyError(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, target{e: e, port: InterpreterPort})), err)
	default:
		status = "error"
	}
	p.s.metrics.dataPath.WithLabelValues("execute", status).Observe(time.Since(start).Seconds())
	if err != nil && sent {
		// Lines (or the headers) went out: the SDK must see the stream cut
		// off, as the plain proxy shows it when the sandbox dies mid-run
		// ("killed while the request was in progress"), not a clean end.
		panic(http.ErrAbortHandler)
	}
	return true
}
