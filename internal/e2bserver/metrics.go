package e2bserver

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus series, in a registry of its own so
// that two servers in one process (tests) don't collide.
type metrics struct {
	reg      *prometheus.Registry
	running  *prometheus.GaugeVec
	creates  *prometheus.CounterVec
	kills    *prometheus.CounterVec
	refused  *prometheus.CounterVec
	api      *prometheus.HistogramVec
	dataPath *prometheus.HistogramVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "code_sandboxes_serve_sandboxes_running",
			Help: "Sandboxes the server holds, by team."}, []string{"team"}),
		creates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "code_sandboxes_serve_creates_total",
			Help: "Sandbox creations, by team and result (ok, quota, error)."}, []string{"team", "result"}),
		kills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "code_sandboxes_serve_kills_total",
			Help: "Sandboxes killed through the API, by team."}, []string{"team"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "code_sandboxes_serve_refused_total",
			Help: "Requests refused, by reason (key, token, traffic_token, loop, quota, rate, no_room)."}, []string{"reason"}),
		api: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "code_sandboxes_serve_api_seconds",
			Help: "Control-plane request latency, by route and status.", Buckets: prometheus.DefBuckets}, []string{"route", "status"}),
		dataPath: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "code_sandboxes_serve_proxy_seconds",
			Help:    "Data-plane time to the upstream's response headers, by kind (envd, tunnel; execute: a whole /execute over the agent's lean connection).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}}, []string{"kind", "status"}),
	}
	m.reg.MustRegister(m.running, m.creates, m.kills, m.refused, m.api, m.dataPath,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// handler serves /metrics.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
