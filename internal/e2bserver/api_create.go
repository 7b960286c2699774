// Creating a sandbox: POST /sandboxes, from the request body to a running,
// registered sandbox, and the room and quota it must fit in.

package e2bserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

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
	if len(req.VolumeMounts) > 0 && snap != "" {
		writeError(w, http.StatusBadRequest, "a sandbox from snapshot %q can't mount volumes; drop volumeMounts or create it from a template", req.TemplateID)
		return
	}
	vmounts, vtags, vrelease, err := s.volumeMountsOf(k.Team, req.VolumeMounts)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	defer vrelease()
	for key, v := range vtags {
		tags[key] = v
	}
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
	cfg.Volumes = vmounts
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
