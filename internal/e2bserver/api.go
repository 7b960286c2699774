package e2bserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/e2bauth"
)

// maxAPIBody bounds control-plane request bodies; real ones are a few KiB
// (metadata and env vars), so anything near this is abuse.
const maxAPIBody = 1 << 20

// defaultTimeout applies when a create request has no timeout; the OpenAPI
// spec's default (the SDKs always send one, 300 s unless told otherwise).
const defaultTimeout = 15 * time.Second

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	// e2b ≥ 2.4x creates and connects through /v2; older SDKs and the Python
	// SDK use the v1 paths. Both answer the same.
	mux.HandleFunc("POST /sandboxes", s.create)
	mux.HandleFunc("POST /v2/sandboxes", s.create)
	mux.HandleFunc("GET /sandboxes", s.listV1)
	mux.HandleFunc("GET /v2/sandboxes", s.listV2)
	mux.HandleFunc("GET /sandboxes/{id}", s.get)
	mux.HandleFunc("DELETE /sandboxes/{id}", s.kill)
	mux.HandleFunc("POST /sandboxes/{id}/timeout", s.setTimeout)
	mux.HandleFunc("POST /sandboxes/{id}/refreshes", s.refresh)
	mux.HandleFunc("POST /sandboxes/{id}/connect", s.connect)
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", s.connect)
	mux.HandleFunc("POST /sandboxes/{id}/resume", s.resume)
	mux.HandleFunc("POST /sandboxes/{id}/pause", s.pause)
	mux.HandleFunc("GET /sandboxes/{id}/metrics", s.sandboxMetrics)
	mux.HandleFunc("GET /sandboxes/{id}/logs", s.sandboxLogs)
	mux.HandleFunc("GET /v2/sandboxes/{id}/logs", s.sandboxLogs)
	mux.HandleFunc("GET /sandboxes/metrics", s.sandboxesMetrics)
	mux.HandleFunc("PUT /sandboxes/{id}/network", s.updateNetwork)
	mux.HandleFunc("POST /sandboxes/{id}/fork", s.fork)
	mux.HandleFunc("POST /sandboxes/{id}/snapshots", s.createSnapshot)
	mux.HandleFunc("GET /snapshots", s.listSnapshots)
	s.templateRoutes(mux)
	s.volumeRoutes(mux)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route for %s %s on this server (a self-hosted E2B: sandboxes API only)", r.Method, r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			_, route := mux.Handler(r)
			s.metrics.api.WithLabelValues(route, strconv.Itoa(rec.status)).Observe(time.Since(start).Seconds())
			s.log.Debug("api", "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration", time.Since(start).Round(time.Millisecond))
		}()
		if r.Method == http.MethodGet && r.URL.Path == "/health" {
			mux.ServeHTTP(rec, r)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/metrics" {
			s.serveMetrics(rec, r)
			return
		}
		if isUpload(r) {
			// A copy step's archive, to a URL whose signature stands for
			// the key (the SDK sends none there, as to E2B's storage).
			s.upload(rec, r)
			return
		}
		if isVolumeContent(r) {
			// A volume's own API: its token, not an API key (as E2B's).
			s.volumeContent(rec, r)
			return
		}
		k, ok := s.checkKey(r)
		if !ok {
			s.metrics.refused.WithLabelValues("key").Inc()
			writeError(rec, http.StatusUnauthorized, "invalid or missing API key: send X-API-Key with a key this server accepts")
			return
		}
		r.Body = http.MaxBytesReader(rec, r.Body, maxAPIBody)
		mux.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), callerKey{}, k)))
	})
}

type callerKey struct{}

// caller is the key (and so the team) a control-plane request acts for.
func caller(r *http.Request) Key {
	k, _ := r.Context().Value(callerKey{}).(Key)
	return k
}

// serveMetrics is Prometheus's /metrics, for holders of the metrics token
// only: series carry team names, which tenants must not learn of each other.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.metricsToken == "" {
		writeError(w, http.StatusNotFound, "/metrics is off; start serve with --metrics-token")
		return
	}
	got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !e2bauth.Equal(got, s.metricsToken) {
		s.metrics.refused.WithLabelValues("key").Inc()
		writeError(w, http.StatusUnauthorized, "/metrics needs Authorization: Bearer <the metrics token>")
		return
	}
	s.metrics.handler().ServeHTTP(w, r)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Flush lets /metrics and long answers stream through the recorder.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) notSupported(what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := s.find(w, r); !ok {
			return
		}
		writeError(w, http.StatusNotImplemented, "%s is not supported by code-sandboxes serve", what)
	}
}

// decode reads a JSON body into v; an empty body leaves v as is when
// allowEmpty (connect and timeout bodies are optional in some SDKs).
func decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) bool {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", mbe.Limit)
		} else {
			writeError(w, http.StatusBadRequest, "reading the request body: %v", err)
		}
		return false
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		if allowEmpty {
			return true
		}
		writeError(w, http.StatusBadRequest, "the request body is empty; send a JSON object")
		return false
	}
	if err := json.Unmarshal(b, v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: %v", err)
		return false
	}
	return true
}
