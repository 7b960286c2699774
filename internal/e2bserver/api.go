package e2bserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bauth"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
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

// newSandbox is E2B's NewSandbox body (the fields we act on; others are
// refused below when they ask for something we can't do).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *autoResumeReq    `json:"autoResume"`
	Network             *networkOpts      `json:"network"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        []json.RawMessage `json:"volumeMounts"`
	MCP                 json.RawMessage   `json:"mcp"`
	// Tools is our extension: the tool sets (or set.tool) to grant the
	// sandbox's code (Options.ToolSets).
	Tools []string `json:"tools"`
}

// sandboxJSON is E2B's Sandbox (create and connect answers).
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
	Alias              string  `json:"alias,omitempty"`
}

// listedSandbox is E2B's ListedSandbox; detail adds SandboxDetail's fields.
type listedSandbox struct {
	TemplateID   string            `json:"templateID"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	Alias        string            `json:"alias,omitempty"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int64             `json:"memoryMB"`
	DiskSizeMB   int64             `json:"diskSizeMB"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	Metadata     map[string]string `json:"metadata"`
	VolumeMounts []any             `json:"volumeMounts"`
}

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

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req newSandbox
	if !decode(w, r, &req, false) {
		return
	}
	s.createWith(w, r, req, "")
}

// createWith creates the sandbox req asks for; from the snapshot (its
// on-disk name) forkOf when given (a fork), else from the caller's
// snapshot if req.TemplateID names one (snapshots.go).
func (s *Server) createWith(w http.ResponseWriter, r *http.Request, req newSandbox, forkOf string) {
	k := caller(r)
	envID := ""
	var tl launch
	snap := forkOf
	if snap == "" && !slices.Contains(templates, req.TemplateID) {
		snap = s.snapshotOf(r.Context(), k.Team, req.TemplateID)
	}
	if snap == "" && !slices.Contains(templates, req.TemplateID) {
		// A template of the caller's team: the sandbox pins the build id
		// the name points at now, so a later build never moves it.
		_, l, err := s.templates.resolveLaunch(k.Team, req.TemplateID, true)
		id := l.envID
		tl = l
		if errors.Is(err, errTemplateNotFound) {
			writeError(w, http.StatusBadRequest, "template %q is unknown; this server has: %s, and the templates your team built", req.TemplateID, strings.Join(templates, ", "))
			return
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		envID = id
	}
	lifetime := defaultTimeout
	if req.Timeout != nil {
		var ok bool
		if lifetime, ok = s.timeout(w, *req.Timeout); !ok {
			return
		}
	}
	private := false
	switch {
	case req.Network != nil && refuseUnsupported(req.Network.Rules, req.Network.EgressProxy, req.Network.HTTPSPorts) != "":
		writeError(w, http.StatusBadRequest, "%s", refuseUnsupported(req.Network.Rules, req.Network.EgressProxy, req.Network.HTTPSPorts))
		return
	case present(req.IAM):
		writeError(w, http.StatusBadRequest, "iam (workload identity tokens for network rules) is not supported by this server, nor are network rules; drop iam")
		return
	case req.Network != nil && req.Network.MaskRequestHost != nil && checkMask(*req.Network.MaskRequestHost) != nil:
		writeError(w, http.StatusBadRequest, "%v", checkMask(*req.Network.MaskRequestHost))
		return
	case req.Secure != nil && !*req.Secure && !s.allowInsecure:
		// On E2B it leaves envd open to anyone who knows the id: only with
		// the operator's opt-in.
		writeError(w, http.StatusBadRequest, "secure: false (a sandbox whose envd needs no access token) is refused: this server runs without %s; drop the secure option, or ask the operator to start serve with %s", insecureFlag, insecureFlag)
		return
	case len(req.VolumeMounts) > 0:
		writeError(w, http.StatusBadRequest, "volume mounts are not supported")
		return
	case len(req.MCP) > 0 && string(req.MCP) != "null":
		writeError(w, http.StatusBadRequest, "MCP gateways are not supported")
		return
	}
	grants := req.Tools
	if v, ok := req.Metadata[ToolsMetadataKey]; ok {
		for _, g := range strings.Split(v, ",") {
			if g = strings.TrimSpace(g); g != "" {
				grants = append(grants, g)
			}
		}
	}
	tools, err := s.grantedTools(grants)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if req.Network != nil && req.Network.AllowPublicTraffic != nil && !*req.Network.AllowPublicTraffic {
		private = true
	}
	hasNetwork := req.Network != nil && (req.Network.AllowOut != nil || req.Network.DenyOut != nil)
	var allowOut, denyOut []string
	if req.Network != nil {
		allowOut, denyOut = req.Network.AllowOut, req.Network.DenyOut
	}
	// The user asked explicitly: honour it either way.
	nw, st, err := s.policyOf(req.AllowInternetAccess, allowOut, denyOut, hasNetwork)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if req.AllowInternetAccess == nil && !hasNetwork {
		nw = sandboxes.Network{Policy: s.defaultNetwork, AllowPrivate: s.allowPrivate && s.defaultNetwork != sandboxes.NetworkNone}
		st = netState{internet: s.defaultNetwork != sandboxes.NetworkNone}
	}
	if snap != "" {
		// A snapshot's sandbox has its snapshot's network: none.
		if (req.AllowInternetAccess != nil && *req.AllowInternetAccess) || (hasNetwork && nw.Policy != sandboxes.NetworkNone) {
			writeError(w, http.StatusBadRequest, "a sandbox from snapshot %q has the network of its snapshot, none (only sandboxes without internet access can be snapshotted); drop allowInternetAccess and network", req.TemplateID)
			return
		}
		nw, st = sandboxes.Network{Policy: sandboxes.NetworkNone}, netState{}
	}
	if err := ceilingError(levelOf(nw), s.maxNetwork, maxNetworkFlag); err != nil {
		// Refused, not narrowed: the client would believe it has what it
		// asked for (the Python SDK asks for the internet on every create).
		s.metrics.refused.WithLabelValues("network_ceiling").Inc()
		writeError(w, http.StatusForbidden, "%v", err)
		return
	}
	if req.Network != nil && req.Network.MaskRequestHost != nil {
		st.mask = *req.Network.MaskRequestHost
	}
	network := nw.Policy
	tags := map[string]string{}
	for key, v := range req.Metadata {
		if key == ToolsMetadataKey {
			continue // a grant, not a label (its commas aren't valid in every variant's labels)
		}
		if strings.HasPrefix(key, tagPrefix) {
			writeError(w, http.StatusBadRequest, "metadata key %q: the prefix %q is reserved by the server", key, tagPrefix)
			return
		}
		tags[key] = v
	}
	for key, v := range s.cfg.Tags {
		tags[key] = v // the operator's tags on every sandbox
	}
	autoPause, autoResume, refusal := s.lifecycleOf(req, nw.Policy)
	if refusal != "" {
		writeError(w, http.StatusBadRequest, "%s", refusal)
		return
	}
	if autoPause {
		tags[tagOnTimeout] = "pause"
	}
	if autoResume {
		tags[tagAutoResume] = "true"
	}
	tags[tagTemplate] = req.TemplateID
	tags[tagTeam] = k.Team
	if private {
		tags[tagPrivate] = "true"
	}
	insecure := req.Secure != nil && !*req.Secure
	if insecure {
		tags[tagInsecure] = "true"
	}
	if !s.startCreate() {
		writeError(w, http.StatusServiceUnavailable, "the server is shutting down; create the sandbox on another server or try again later")
		return
	}
	defer s.creates.Done()
	q, release, err := s.reserve(k.Team, autoPause)
	if errors.Is(err, errQuota) && !errors.Is(err, errRate) && s.mayRelist(k.Team) {
		// Sandboxes that ended by their timeout still count until a listing
		// notices; look, then decide. A listing costs the variant (engine or
		// API server) a round of calls, so a team's refusals re-list at most once
		// per relistEvery, and a rate refusal never: a listing can't change it.
		s.relists.Add(1)
		if _, lerr := s.ours(r.Context(), ""); lerr == nil {
			q, release, err = s.reserve(k.Team, autoPause)
		}
	}
	if err != nil {
		reason := "quota"
		if errors.Is(err, errRate) {
			reason = "rate"
		}
		s.metrics.creates.WithLabelValues(k.Team, reason).Inc()
		s.metrics.refused.WithLabelValues(reason).Inc()
		s.log.Warn("create refused", "team", k.Team, "key", keyID(k.Key), "reason", err.Error())
		writeError(w, http.StatusTooManyRequests, "%v", err)
		return
	}
	defer release()
	cfg := s.cfg
	cfg.Tags = tags
	cfg.Env = req.EnvVars
	cfg.MaxLifetime, cfg.AutoPause = lifetime, autoPause
	cfg.NetworkPolicy, cfg.AllowedHosts, cfg.DeniedHosts, cfg.AllowPrivate = nw.Policy, nw.AllowedHosts, nw.DeniedHosts, nw.AllowPrivate
	cfg.Tools = tools
	cfg.Memory, cfg.CPU = q.Memory, q.CPU
	if envID != "" {
		cfg.Environment = envID
	}
	cfg.Snapshot = snap
	// The request must not be what ends the sandbox's creation half-way when
	// the client gives up; a bounded background context does.
	// Shutdown ends it too (after its grace period), so a create can't
	// outlive the server and leave a sandbox nobody holds.
	ctx, cancel := context.WithTimeout(s.createCtx, 2*time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		s.metrics.creates.WithLabelValues(k.Team, "error").Inc()
		if errors.Is(err, sandboxes.ErrNoRoom) {
			s.writeNoRoom(w, "creating the sandbox", err)
			return
		}
		status := http.StatusInternalServerError
		if isClientError(err) {
			status = http.StatusBadRequest
		}
		s.log.Error("create failed", "team", k.Team, "key", keyID(k.Key), "error", err)
		writeError(w, status, "creating the sandbox: %v", err)
		return
	}
	if snap != "" {
		// A fork starts with what its snapshot had left; the timeout asked.
		if err := sb.SetTimeout(ctx, lifetime); err != nil {
			_ = sb.Close()
			s.metrics.creates.WithLabelValues(k.Team, "error").Inc()
			writeError(w, http.StatusInternalServerError, "creating the sandbox: %v", err)
			return
		}
	}
	var logs *sandboxLog
	if tl.start != "" || tl.ready != "" {
		logs = &sandboxLog{}
		if err := launchTemplate(ctx, sb, tl, logs); err != nil {
			_ = sb.Close() // nothing left running
			s.metrics.creates.WithLabelValues(k.Team, "error").Inc()
			s.log.Warn("create failed: template start", "team", k.Team, "key", keyID(k.Key), "template", req.TemplateID, "error", err)
			writeError(w, http.StatusInternalServerError, "creating the sandbox: %v", err)
			return
		}
	}
	e, err := s.newEntry(sb, k.Team, req.TemplateID, private, q.Memory, q.CPU)
	if err != nil {
		// Nothing half-created stays behind.
		_ = sb.Close()
		s.metrics.creates.WithLabelValues(k.Team, "error").Inc()
		writeError(w, http.StatusInternalServerError, "creating the sandbox: %v", err)
		return
	}
	e.logs = logs
	e.autoResume, e.autoPause = autoResume, autoPause
	e.insecure = insecure
	e.net.Store(&st)
	e.level.Store(int32(levelOf(nw)))
	if testHookCreated != nil {
		testHookCreated()
	}
	if !s.commit(e) {
		// Shutdown began while it was created: KillCreated has run or is
		// running, so the sandbox would be nobody's. It goes now.
		_ = sb.Close()
		s.metrics.creates.WithLabelValues(k.Team, "error").Inc()
		writeError(w, http.StatusServiceUnavailable, "the server shut down while the sandbox was created; it was removed, create it again on a running server")
		return
	}
	s.metrics.creates.WithLabelValues(k.Team, "ok").Inc()
	s.log.Info("created", "sandbox", e.id, "team", k.Team, "key", keyID(k.Key), "template", req.TemplateID,
		"network", network, "memory_bytes", q.Memory, "cpus", q.CPU, "private", private, "insecure", insecure)
	writeJSON(w, http.StatusCreated, s.sandboxJSON(e))
}

// sandboxJSON is the create and connect answer: both tokens, always
// (but the envd token of an insecure sandbox, which E2B never sends: its
// SDKs then send none). The traffic token goes out even for public
// sandboxes because the code interpreter SDKs authenticate /contexts with it.
func (s *Server) sandboxJSON(e *entry) sandboxJSON {
	traffic := e.traffic
	return sandboxJSON{TemplateID: e.template, SandboxID: e.id, ClientID: clientID, EnvdVersion: EnvdVersion,
		Alias: e.template, EnvdAccessToken: e.envdToken(), TrafficAccessToken: &traffic}
}

// envdToken is the envd access token the API shows: none for an insecure
// sandbox.
func (e *entry) envdToken() string {
	if e.insecure {
		return ""
	}
	return e.token
}

// errQuota is a create over the team's quota; errRate one over its creates
// per minute.
var (
	errQuota = errors.New("quota exceeded")
	errRate  = fmt.Errorf("%w: rate limit", errQuota)
)

// testHookCreated, when set by a test, runs between a sandbox's creation
// and its commit.
var testHookCreated func()

// relistEvery bounds how often refused creates re-list the variant's
// sandboxes (see create).
const relistEvery = 5 * time.Second

// mayRelist reports whether a refused create may re-list now, and if so
// takes the turn.
func (s *Server) mayRelist(team string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.teams[team]
	now := time.Now()
	if ts == nil || (!ts.lastRelist.IsZero() && now.Sub(ts.lastRelist) < relistEvery) {
		return false
	}
	ts.lastRelist = now
	return true
}

// startCreate counts a create in flight, or refuses it once shutdown began;
// the caller calls s.creates.Done when it ends.
func (s *Server) startCreate() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.creates.Add(1)
	return true
}

// reserve counts a create against the team's quota (and, with autoPause,
// a paused slot: pausequota.go) before it starts, so that concurrent
// creates can't overshoot it; release undoes the reservation (after commit
// it only drops the pending count).
func (s *Server) reserve(team string, autoPause bool) (Quota, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.teams[team]
	if ts == nil {
		// A team whose keys were removed by a reload.
		return Quota{}, nil, fmt.Errorf("%w: team %s has no key any more", errQuota, team)
	}
	q := ts.quota
	n, mem, cpu := s.runningLocked(ts, team, nil)
	if err := quotaError(team, q, n, mem, cpu, q.Memory, q.CPU); err != nil {
		return q, nil, err
	}
	if autoPause {
		if n := s.pausedSlotsLocked(ts, team); n >= s.maxPausedPerTeam() {
			return q, nil, s.pausedCapError(team, n)
		}
	}
	if ts.limiter != nil && !ts.limiter.Allow() {
		return q, nil, fmt.Errorf("%w: team %s may create %d sandboxes per minute; try again later", errRate, team, q.CreatesPerMinute)
	}
	ts.pending++
	ts.pendingMem += q.Memory
	ts.pendingCPU += q.CPU
	if autoPause {
		ts.pendingPaused++
	}
	return q, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		ts.pending--
		ts.pendingMem -= q.Memory
		ts.pendingCPU -= q.CPU
		if autoPause {
			ts.pendingPaused--
		}
	}, nil
}

// commit records a created sandbox; the caller then releases its
// reservation, under which it was counted until now. It refuses once
// shutdown began, and the caller then removes the sandbox.
func (s *Server) commit(e *entry) bool {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return false
	}
	s.sandboxes[e.id] = e
	s.mu.Unlock()
	s.metrics.running.WithLabelValues(e.team).Inc()
	return true
}

// timeout converts E2B's seconds, bounded by MaxTimeout.
func (s *Server) timeout(w http.ResponseWriter, secs int64) (time.Duration, bool) {
	if secs <= 0 {
		writeError(w, http.StatusBadRequest, "timeout must be a positive number of seconds, got %d", secs)
		return 0, false
	}
	if secs > int64(s.maxTimeout/time.Second) {
		writeError(w, http.StatusBadRequest, "timeout of %ds is longer than this server allows (%ds)", secs, int64(s.maxTimeout/time.Second))
		return 0, false
	}
	return time.Duration(secs) * time.Second, true
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

func metadataOf(i sandboxes.Info) map[string]string {
	m := map[string]string{}
	for k, v := range i.Tags {
		if !strings.HasPrefix(k, tagPrefix) {
			m[k] = v
		}
	}
	return m
}

// hostMemoryMB is the memory a sandbox without a limit can use.
var hostMemoryMB = sync.OnceValue(func() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10
		}
	}
	return 0
})

func listed(i sandboxes.Info) listedSandbox {
	cpus := runtime.NumCPU()
	if i.CPUs > 0 {
		cpus = max(1, int(i.CPUs+0.999))
	}
	mem := hostMemoryMB()
	if i.Memory > 0 {
		mem = i.Memory >> 20
	}
	t := i.Tags[tagTemplate]
	state := "running"
	if i.Status == sandboxes.StatusPaused {
		state = "paused"
	}
	return listedSandbox{TemplateID: t, SandboxID: i.ID, ClientID: clientID, Alias: t,
		StartedAt: i.CreatedAt.UTC(), EndAt: i.EndAt.UTC(), CPUCount: cpus, MemoryMB: mem,
		// The sandbox's writable space: tmpfs /home/user, /files and /tmp.
		DiskSizeMB: (isolate.DefaultHomeSize + isolate.DefaultFilesSize + isolate.DefaultTmpSize) >> 20,
		State:      state, EnvdVersion: EnvdVersion, Metadata: metadataOf(i), VolumeMounts: []any{}}
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	e, i, ok := s.findPausable(w, r) // a paused sandbox has details (state paused)
	if !ok {
		return
	}
	d := sandboxDetail{listedSandbox: listed(i), AllowInternetAccess: i.Network == sandboxes.NetworkAll, EnvdAccessToken: e.envdToken()}
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

// listV1 is the deprecated GET /sandboxes: every running sandbox, filtered by
// metadata, unpaginated.
func (s *Server) listV1(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	meta, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	infos, err := s.ours(r.Context(), caller(r).Team)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "listing sandboxes: %v", err)
		return
	}
	out := []listedSandbox{}
	for _, i := range infos {
		if matchMetadata(i, meta) {
			out = append(out, listed(i))
		}
	}
	slices.SortFunc(out, newestFirst)
	writeJSON(w, http.StatusOK, out)
}

func newestFirst(a, b listedSandbox) int {
	if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
		return c
	}
	return strings.Compare(a.SandboxID, b.SandboxID)
}

// parseMetadataQuery decodes the metadata filter: a query string inside a
// query parameter whose keys and values the SDKs additionally
// percent-encode (JS: encodeURIComponent, then URLSearchParams), so it is
// unescaped twice, as E2B's API does.
func parseMetadataQuery(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("metadata filter %q: %v (send key=value pairs joined by &)", raw, err)
	}
	out := map[string]string{}
	for k, vs := range vals {
		key, err := url.QueryUnescape(k)
		if err != nil {
			key = k // as for values below
		}
		for _, v := range vs {
			val, err := url.QueryUnescape(v)
			if err != nil {
				// Python's SDK encodes once, not twice: a value such as
				// "50%" arrives decoded already and is taken as it is.
				val = v
			}
			if old, dup := out[key]; dup && old != val {
				return nil, fmt.Errorf("metadata filter key %q is given twice with different values", key)
			}
			out[key] = val
		}
	}
	return out, nil
}

func matchMetadata(i sandboxes.Info, want map[string]string) bool {
	for k, v := range want {
		if strings.HasPrefix(k, tagPrefix) {
			return false
		}
		if got, ok := i.Tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

const (
	defaultListLimit = 100
	maxListLimit     = 100
)

// listV2 is GET /v2/sandboxes: metadata, state, template and startedAfter
// filters, newest first (order=asc reverses), limit plus X-Next-Token paging.
func (s *Server) listV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	meta, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	wantRunning, wantPaused := true, true // no state: every one
	if states := q["state"]; len(states) > 0 {
		wantRunning, wantPaused = false, false
		for _, st := range states {
			for p := range strings.SplitSeq(st, ",") {
				switch strings.TrimSpace(p) {
				case "running":
					wantRunning = true
				case "paused":
					wantPaused = true
				default:
					writeError(w, http.StatusBadRequest, "state %q is unknown; use running or paused", p)
					return
				}
			}
		}
	}
	limit := defaultListLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxListLimit {
			writeError(w, http.StatusBadRequest, "limit %q: give a number from 1 to %d", l, maxListLimit)
			return
		}
		limit = n
	}
	var after time.Time
	if sa := q.Get("startedAfter"); sa != "" {
		if after, err = time.Parse(time.RFC3339Nano, sa); err != nil {
			writeError(w, http.StatusBadRequest, "startedAfter %q: use an RFC 3339 time", sa)
			return
		}
	}
	asc := false
	switch o := strings.ToLower(q.Get("order")); o {
	case "", "desc":
	case "asc":
		asc = true
	default:
		writeError(w, http.StatusBadRequest, "order %q: use asc or desc", o)
		return
	}
	var cursor *listedSandbox
	if tok := q.Get("nextToken"); tok != "" {
		c, err := decodeCursor(tok)
		if err != nil {
			writeError(w, http.StatusBadRequest, "nextToken %q is invalid: pass the X-Next-Token of a previous answer", tok)
			return
		}
		cursor = &c
	}
	template := q.Get("template")

	out := []listedSandbox{}
	if wantRunning || wantPaused {
		infos, err := s.ours(r.Context(), caller(r).Team)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "listing sandboxes: %v", err)
			return
		}
		for _, i := range infos {
			if paused := i.Status == sandboxes.StatusPaused; (paused && !wantPaused) || (!paused && !wantRunning) {
				continue
			}
			if matchMetadata(i, meta) && (template == "" || i.Tags[tagTemplate] == template) && (after.IsZero() || i.CreatedAt.After(after)) {
				out = append(out, listed(i))
			}
		}
	}
	cmp := newestFirst
	if asc {
		cmp = func(a, b listedSandbox) int { return newestFirst(b, a) }
	}
	slices.SortFunc(out, cmp)
	if cursor != nil {
		// Resume strictly after the cursor, which need not exist any more
		// (killed since), so compare rather than look it up.
		n := 0
		for n < len(out) && cmp(out[n], *cursor) <= 0 {
			n++
		}
		out = out[n:]
	}
	if len(out) > limit {
		out = out[:limit]
		w.Header().Set("X-Next-Token", encodeCursor(out[limit-1]))
	}
	writeJSON(w, http.StatusOK, out)
}

// A cursor is the sort key of the last sandbox of a page.
func encodeCursor(l listedSandbox) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(l.StartedAt.UnixNano(), 10) + "." + l.SandboxID))
}

func decodeCursor(tok string) (listedSandbox, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return listedSandbox{}, err
	}
	ns, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || !sandboxIDPattern.MatchString(id) {
		return listedSandbox{}, errors.New("malformed cursor")
	}
	return listedSandbox{StartedAt: time.Unix(0, n).UTC(), SandboxID: id}, nil
}

func parseUnix(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) }

// grantedTools resolves a create request's tool grants: "set" is every tool
// of a configured set, "set.tool" one of them. Anything else is refused with
// what there is.
func (s *Server) grantedTools(grants []string) ([]sandboxes.Tool, error) {
	if len(grants) == 0 {
		return nil, nil
	}
	if len(s.toolSets) == 0 {
		return nil, fmt.Errorf("tools %q: this server has no tool sets (start serve with --tool-server NAME=CMD_OR_URL)", grants)
	}
	var out []sandboxes.Tool
	seen := map[string]bool{}
	add := func(t sandboxes.Tool) error {
		if seen[t.Name] {
			return nil
		}
		seen[t.Name] = true
		out = append(out, t)
		if len(out) > sandboxes.MaxTools {
			return fmt.Errorf("more than %d tools granted", sandboxes.MaxTools)
		}
		return nil
	}
	for _, g := range grants {
		set, tool, one := strings.Cut(g, ".")
		tools, ok := s.toolSets[set]
		if !ok {
			names := make([]string, 0, len(s.toolSets))
			for n := range s.toolSets {
				names = append(names, n)
			}
			slices.Sort(names)
			return nil, fmt.Errorf("tools: %q is no tool set of this server (it has: %s)", set, strings.Join(names, ", "))
		}
		found := false
		for _, t := range tools {
			if !one || t.Name == tool {
				found = true
				if err := add(t); err != nil {
					return nil, err
				}
			}
		}
		if !found {
			var names []string
			for _, t := range tools {
				names = append(names, t.Name)
			}
			return nil, fmt.Errorf("tools: tool set %q has no tool %q (it has: %s)", set, tool, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// writeNoRoom answers a create or resume the host has no room for now
// (sandboxes.ErrNoRoom: out of process ids or memory): 503 with Retry-After, since
// it may pass once other sandboxes end. The tenant learns that much; the
// limit and the host's numbers (cgroup paths among them) go to the log,
// for the operator, who can raise it.
func (s *Server) writeNoRoom(w http.ResponseWriter, what string, err error) {
	s.metrics.refused.WithLabelValues("no_room").Inc()
	s.log.Warn("no room for another sandbox", "what", what, "error", err)
	w.Header().Set("Retry-After", "5")
	writeError(w, http.StatusServiceUnavailable, "%s: this server has no room for another sandbox right now; try again later", what)
}
