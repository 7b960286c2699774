package e2bserver

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
)

// sandboxMetric is E2B's SandboxMetric.
type sandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// metricOf samples e's cgroup through its variant. CPU use is the average
// since the previous sample (or since the sandbox started), as a percentage
// of its CPU limit.
func (s *Server) metricOf(ctx context.Context, e *entry, started time.Time) (sandboxMetric, error) {
	ur, ok := e.inst.(driver.UsageReader)
	if !ok {
		return sandboxMetric{}, sandboxes.ErrNotSupported
	}
	u, err := ur.Usage(ctx)
	if err != nil {
		return sandboxMetric{}, err
	}
	cpus := u.CPUs
	if cpus <= 0 {
		cpus = float64(runtime.NumCPU())
	}
	s.mu.Lock()
	prev := e.lastUsage
	e.lastUsage = u
	s.mu.Unlock()
	if prev.Time.IsZero() {
		prev = driver.Usage{Time: started}
	}
	pct := 0.0
	if dt := u.Time.Sub(prev.Time); dt > 0 && u.CPUTime >= prev.CPUTime {
		pct = min(100, float64(u.CPUTime-prev.CPUTime)/float64(dt)/cpus*100)
	}
	memTotal := u.MemLimit
	if memTotal <= 0 {
		memTotal = hostMemoryMB() << 20
	}
	return sandboxMetric{Timestamp: u.Time.UTC(), TimestampUnix: u.Time.Unix(), CPUCount: max(1, int(cpus+0.999)),
		CPUUsedPct: pct, MemUsed: u.MemUsed, MemTotal: memTotal, MemCache: u.MemCache, DiskUsed: u.DiskUsed,
		DiskTotal: isolate.DefaultHomeSize + isolate.DefaultFilesSize + isolate.DefaultTmpSize}, nil
}

// sandboxMetrics is GET /sandboxes/{id}/metrics: one sample, taken now (the
// server keeps no history; start and end are accepted and a sample outside
// them is left out).
func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) {
	e, i, ok := s.find(w, r)
	if !ok {
		return
	}
	m, err := s.metricOf(r.Context(), e, i.CreatedAt)
	if errors.Is(err, sandboxes.ErrNotSupported) {
		writeError(w, http.StatusNotImplemented, "sandbox metrics are not available on the %s variant", s.cfg.Variant)
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "reading the metrics of sandbox %s: %v", e.id, err)
		return
	}
	out := []sandboxMetric{m}
	q := r.URL.Query()
	for _, bound := range []struct {
		name   string
		before bool
	}{{"start", true}, {"end", false}} {
		if v := q.Get(bound.name); v != "" {
			t, err := parseUnix(v)
			if err != nil {
				writeError(w, http.StatusBadRequest, "%s %q: give a unix time in seconds", bound.name, v)
				return
			}
			if (bound.before && m.TimestampUnix < t) || (!bound.before && m.TimestampUnix > t) {
				out = []sandboxMetric{}
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// sandboxesMetrics is GET /sandboxes/metrics?sandbox_ids=a,b: the latest
// sample of each of the team's sandboxes named; others are left out.
func (s *Server) sandboxesMetrics(w http.ResponseWriter, r *http.Request) {
	team := caller(r).Team
	out := map[string]sandboxMetric{}
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		ids = append(ids, strings.Split(v, ",")...)
	}
	if len(ids) > 100 {
		writeError(w, http.StatusBadRequest, "at most 100 sandbox_ids at once")
		return
	}
	for _, id := range ids {
		e := s.lookup(strings.TrimSpace(id), team)
		if e == nil {
			continue
		}
		i, err := e.inst.Info(r.Context())
		if err != nil {
			continue
		}
		if m, err := s.metricOf(r.Context(), e, i.CreatedAt); err == nil {
			out[e.id] = m
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}
