// Package e2bserver is a self-hosted E2B: one HTTP handler that serves both
// E2B's control plane (the REST API at api.e2b.app: create, list, get, kill,
// timeout, connect) on top of the public Go API, and its data plane (envd and
// the code interpreter) by reverse-proxying to each sandbox's own agent, which
// already speaks those protocols. The official SDKs work unchanged with
//
//	E2B_API_URL=http://127.0.0.1:3000
//	E2B_SANDBOX_URL=http://127.0.0.1:3000
//	E2B_API_KEY=e2b_<hex>
//
// A request that names a sandbox (header E2b-Sandbox-Id, or a Host of the
// form <port>-<id>.<domain>) is data plane; everything else is control plane.
//
// Each API key belongs to a team, and a team sees only its own sandboxes.
// The server reaches sandboxes only through the variant interface, so any
// variant (local, docker, kubernetes) can run behind it. It only exposes
// sandboxes created through an E2B API (it marks them with reserved tags),
// so sandboxes made with the CLI or the Go API stay out of reach.
package e2bserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bauth"
	ilocal "github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// EnvdVersion is the envd version our agent implements (docs/agent-protocol.md).
// The SDKs gate features on it, so it must not claim more than the agent does:
// 0.6.2 upload metadata, 0.6.3 entry info in watch events, 0.6.4
// allow_network_mounts (the newest the SDK checks for).
const EnvdVersion = "0.6.4"

// clientID is the constant E2B's API returns in the deprecated clientID field;
// the Python SDK requires the key to be present.
const clientID = "6532622b"

// Ports the SDKs address inside a sandbox; our agent serves both on one socket.
const (
	EnvdPort        = 49983
	InterpreterPort = 49999
)

// Reserved tags under which the server keeps what the E2B API needs and our
// records don't have. User metadata may not use this prefix.
const (
	tagPrefix   = "e2bserver/"
	tagTemplate = tagPrefix + "template" // its presence marks a sandbox as ours
	tagTeam     = tagPrefix + "team"     // the team whose key created it
	tagPrivate  = tagPrefix + "private"  // "true": allowPublicTraffic false
	tagInsecure = tagPrefix + "insecure" // "true": created with secure false
)

// insecureFlag is serve's flag behind Options.AllowInsecureSandboxes,
// named in the refusal of secure: false.
const insecureFlag = "--allow-insecure-sandboxes"

// Templates the server accepts; both are the same sandbox (our agent serves
// envd and the interpreter alike), but the SDKs pick them by name.
var templates = []string{"base", "code-interpreter-v1"}

// apiKeyPattern is the format the SDKs check client-side before any request.
var apiKeyPattern = regexp.MustCompile(`^e2b_[0-9a-f]+$`)

// teamPattern keeps team names usable as tag values and log fields.
var teamPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidAPIKey reports whether key has the shape the official SDKs accept.
func ValidAPIKey(key string) bool { return apiKeyPattern.MatchString(key) }

// ValidTeam reports whether name can name a team.
func ValidTeam(name string) bool { return teamPattern.MatchString(name) }

// Key is an accepted API key and the team it acts for.
type Key struct {
	Key string
	// Team names the tenant; keys with the same team share its sandboxes
	// and quota. "" = a team of this key alone ("key-" and a hash of it).
	Team string
	// Quota, when set, is the team's quota instead of Options.Quota.
	Quota *Quota
}

// Quota bounds what one team may hold; zero fields are unbounded, except
// Memory and CPU, which then take Options.Config's limits.
type Quota struct {
	Sandboxes        int     // running at once
	Memory           int64   // bytes, the limit of each sandbox
	CPU              float64 // cores, the limit of each sandbox
	TotalMemory      int64   // bytes, the sum of the team's sandboxes' limits
	TotalCPU         float64 // cores, likewise
	CreatesPerMinute int
}

// Options configure a Server.
type Options struct {
	// APIKeys are accepted X-API-Key values of the team "default"; Keys
	// adds keys with their own teams. At least one key in all, each e2b_<hex>.
	APIKeys []string
	Keys    []Key
	// Config is the base of every sandbox the server creates: variant and
	// its settings, and the default memory and CPU limit of each sandbox.
	Config sandboxes.Config
	// Quota applies to every team without a quota of its own.
	Quota Quota
	// DefaultNetwork applies when a create request omits allow_internet_access
	// (the JS SDK omits it unless the user sets it): "none" (our safe default)
	// or "all" (E2B's default).
	DefaultNetwork string
	// MaxNetwork is the most network a request may give a sandbox (serve
	// --max-network): "none", "allowlist" or "all" ("" = all, no ceiling).
	// A create, network update or resume above it is refused with 403,
	// never narrowed (ceiling.go); DefaultNetwork must be at or below it.
	MaxNetwork string
	// RequireTrafficToken makes every tunnel (ports other than envd's and
	// the interpreter's) need the sandbox's traffic access token, as if every
	// sandbox were created with allowPublicTraffic false.
	RequireTrafficToken bool
	// AllowInsecureSandboxes lets a create ask for secure: false, as on
	// E2B: that sandbox's envd and interpreter then answer anyone who
	// reaches serve and knows the sandbox's id, without a token (serve
	// --allow-insecure-sandboxes). Refused with 400 otherwise. The control
	// plane (create, connect, kill…) still needs the team's API key.
	AllowInsecureSandboxes bool
	// AllowPrivate lets sandboxes with network reach the private ranges
	// (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) and lets allowOut
	// list them; refused by default (the host itself, loopback and cloud
	// metadata stay unreachable regardless).
	AllowPrivate bool
	// MetricsToken is the bearer token of GET /metrics (Prometheus); ""
	// turns /metrics off.
	MetricsToken string
	// MaxTimeout bounds a sandbox's timeout (create, setTimeout, connect);
	// default 24h, E2B's longest.
	MaxTimeout time.Duration
	// MaxSnapshots bounds the snapshots a team keeps (each a whole
	// sandbox's checkpoint on disk); default 20.
	MaxSnapshots int
	// MaxPaused bounds a team's paused sandboxes, counting those that
	// pause at their timeout (autoPause) from their create on; default 20.
	// Paused sandboxes don't count against Quota (as on E2B): this is
	// what keeps a team from hoarding checkpoints on disk.
	MaxPaused int
	// TemplateBuilds turns on E2B's template build API (Template.build):
	// teams' build steps then run on this machine, jailed (a user namespace
	// of their own, never host root; the internet through the egress
	// policy; SECURITY.md). Listing, using and deleting templates works
	// either way.
	TemplateBuilds bool
	// TemplateLoopback are ports of this machine's loopback that build
	// steps may reach at 127.0.0.1:port (a package index served here);
	// none by default (environment.Store.LoopbackPorts).
	TemplateLoopback []int
	// TemplateUploadQuota bounds a team's stored template files (the
	// archives of COPY steps) in bytes; 0 = 2 GiB.
	TemplateUploadQuota int64
	// Logger receives who created, connected to and killed what, and one
	// debug line per API call; nil = discard.
	Logger *slog.Logger
	// VolumeDir keeps E2B volumes (volumes.go), a directory per volume;
	// "" = e2b-volumes in the environment store's directory (beside the
	// templates). VolumeSize is each volume's size in bytes (0 =
	// DefaultVolumeSize); MaxVolumes bounds a team's volumes (0 =
	// DefaultMaxVolumes).
	VolumeDir  string
	VolumeSize int64
	MaxVolumes int
	// ToolSets are the tools a create request may grant its sandbox, by
	// set name (serve's --tool-server NAME=…: the tools of one MCP
	// server). E2B's SDKs can't register functions, so this is how code
	// in a sandbox created through serve reaches tools: our extension of
	// the create body, "tools": ["set", "set.tool", …], or the metadata
	// key ToolsMetadataKey (docs/agent-protocol.md).
	ToolSets map[string][]sandboxes.Tool
	// Console serves the web console (internal/console) at / and
	// /console/ on the listener (serve --console).
	Console bool
}

// ToolsMetadataKey is the create request's metadata key that grants tool
// sets when the client can't send the body's "tools" field (E2B's SDKs
// send only the fields they know; metadata passes through): a
// comma-separated list like the field's.
const ToolsMetadataKey = "code-sandboxes/tools"

// Server is the E2B-compatible HTTP handler.
type Server struct {
	cfg            sandboxes.Config
	defaultQuota   Quota
	defaultNetwork string
	maxNetwork     int // a level (ceiling.go)
	requireTraffic bool
	allowInsecure  bool
	allowPrivate   bool
	metricsToken   string
	maxTimeout     time.Duration
	maxSnaps       int        // Options.MaxSnapshots
	maxPaused      int        // Options.MaxPaused
	snapMu         sync.Mutex // snapshots: one taken or deleted at a time (snapshots.go)
	log            *slog.Logger
	api            http.Handler
	proxy          *dataPlane
	metrics        *metrics
	templates      *templateStore
	volumes        *volumeStore
	// via marks requests this server forwards, so that one coming back
	// (a tunnel to the server's own listener) is refused, not looped.
	via string

	keysMu sync.RWMutex
	keys   []Key

	toolSets map[string][]sandboxes.Tool
	front    http.Handler // what the listener serves: s, maybe behind the console (console.go)

	mu        sync.Mutex
	sandboxes map[string]*entry // the live sandboxes we created or adopted
	teams     map[string]*teamState
	closing   bool // shutdown began: no create starts or commits

	// creates counts creates in flight, so that shutdown waits for them;
	// createCtx bounds them and ends with the shutdown's grace period.
	creates     sync.WaitGroup
	createCtx   context.Context
	stopCreates context.CancelFunc
	relists     atomic.Int64 // refused creates that re-listed (for tests)
	stateReads  atomic.Int64 // sandbox states read by the data path (for tests)
	sigChecks   atomic.Int64 // signed /files URLs checked against a sandbox's token (for tests)
}

// entry is one sandbox as the server holds it.
type entry struct {
	id, team, template string
	sb                 *sandboxes.Sandbox
	inst               driver.Instance
	token, traffic     string
	private            bool // allowPublicTraffic false
	// insecure: created with secure false on a server that allows it; its
	// envd and interpreter take requests without the token (the proxy adds
	// it: the agent inside still checks one).
	insecure    bool
	net         atomic.Pointer[netState]
	level       atomic.Int32 // of its network (ceiling.go): a resume above the ceiling is refused
	netMu       sync.Mutex   // one network update at a time (each waits for its own to apply)
	memory      int64
	cpus        float64
	tunnel      *http.Transport
	agentScheme string // of the variant client's envd URL
	agentHost   string
	lastUsage   driver.Usage // guarded by Server.mu
	inflight    atomic.Int32 // data-plane requests open
	logs        *sandboxLog  // the template's start command's output; nil = none
	autoResume  bool         // traffic resumes it when paused (autopause.go)
	autoPause   bool         // pauses at its timeout: holds a paused slot (pausequota.go)
	// paused, resuming and resumes are guarded by Server.mu (pausequota.go):
	// paused, serve's view, keeps the sandbox out of its team's quota.
	paused, resuming bool
	resumes          int
	resumeMu         sync.Mutex // one resume by traffic at a time
	// runningUntil (unix ns): the sandbox is known to run until then, its
	// state not read again before (autopause.go); 0 = unknown.
	runningUntil atomic.Int64
}

// teamState is a team's quota and what it has in flight.
type teamState struct {
	quota      Quota
	limiter    *rate.Limiter
	pending    int
	pendingMem int64
	pendingCPU float64
	// pendingPaused: pauses and autoPause creates in flight (pausequota.go).
	pendingPaused int
	lastRelist    time.Time // of a refused create (mayRelist)
}

// New validates o and returns a Server.
func New(o Options) (*Server, error) {
	s := &Server{cfg: o.Config, defaultQuota: o.Quota, defaultNetwork: o.DefaultNetwork, requireTraffic: o.RequireTrafficToken, allowInsecure: o.AllowInsecureSandboxes, allowPrivate: o.AllowPrivate, metricsToken: o.MetricsToken,
		maxTimeout: o.MaxTimeout, maxSnaps: o.MaxSnapshots, maxPaused: o.MaxPaused, log: o.Logger, sandboxes: map[string]*entry{}, teams: map[string]*teamState{}, toolSets: o.ToolSets}
	s.createCtx, s.stopCreates = context.WithCancel(context.Background())
	for name := range o.ToolSets {
		if name == "" || strings.ContainsAny(name, ".,= \t") {
			return nil, fmt.Errorf("e2bserver: tool set name %q: use letters, digits, - and _ (no . , = or spaces)", name)
		}
	}
	keys := o.Keys
	for _, k := range o.APIKeys {
		keys = append(keys, Key{Key: k, Team: "default"})
	}
	if err := s.SetKeys(keys); err != nil {
		return nil, err
	}
	if _, err := s.limits(s.defaultQuota); err != nil {
		return nil, err
	}
	s.cfg.Variant = sandboxes.NormalizeVariant(s.cfg.Variant)
	if s.cfg.Variant == "" {
		s.cfg.Variant = "local"
	}
	if s.cfg.Variant == "e2b" {
		return nil, errors.New("e2bserver: variant e2b: serve fronts sandboxes it runs itself; use local, docker or kubernetes")
	}
	if !contains(sandboxes.Variants(), s.cfg.Variant) {
		return nil, fmt.Errorf("e2bserver: unknown variant %q; use one of %s", s.cfg.Variant, strings.Join(sandboxes.Variants(), ", "))
	}
	if s.cfg.Variant == "local" {
		// Resolve the runtime directory once, so that a later change of the
		// environment can't split the server's sandboxes over two places.
		lo, err := driver.OptionsOf[ilocal.Options](driver.Spec{Variant: "local", Options: s.cfg.Options})
		if err != nil {
			return nil, fmt.Errorf("e2bserver: %w", err)
		}
		s.cfg.Options = local.Options(lo.Resolved())
	}
	switch s.defaultNetwork {
	case "":
		s.defaultNetwork = sandboxes.NetworkNone
	case sandboxes.NetworkNone, sandboxes.NetworkAll:
	default:
		return nil, fmt.Errorf("e2bserver: default network %q: use none or all", s.defaultNetwork)
	}
	var err error
	if s.maxNetwork, err = parseLevel(o.MaxNetwork, levelAll); err != nil {
		return nil, fmt.Errorf("e2bserver: %s: %w", maxNetworkFlag, err)
	}
	if d, _ := parseLevel(s.defaultNetwork, levelNone); d > s.maxNetwork {
		return nil, fmt.Errorf("e2bserver: the default network (--default-network) %s is above the ceiling %s %s: lower --default-network to %s or raise %s",
			s.defaultNetwork, maxNetworkFlag, levelNames[s.maxNetwork], sandboxes.NetworkNone, maxNetworkFlag)
	}
	if s.maxTimeout <= 0 {
		s.maxTimeout = 24 * time.Hour
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	s.via = hex.EncodeToString(b[:])
	s.metrics = newMetrics(s)
	if s.templates, err = newTemplatesQuota(s.cfg.EnvironmentDir, o.TemplateBuilds, o.TemplateLoopback, o.TemplateUploadQuota); err != nil {
		return nil, fmt.Errorf("e2bserver: templates: %w", err)
	}
	vdir := o.VolumeDir
	if vdir == "" {
		vdir = filepath.Join(s.templates.store.Dir, "e2b-volumes")
	}
	if s.volumes, err = newVolumeStore(vdir, o.VolumeSize, o.MaxVolumes); err != nil {
		return nil, fmt.Errorf("e2bserver: volumes: %w", err)
	}
	s.api = s.routes()
	s.proxy = newDataPlane(s)
	if s.allowInsecure {
		// Said once at start: the operator chose it, the log shows it.
		s.log.Warn("secure: false is allowed (" + insecureFlag + "): the envd of a sandbox created so answers anyone who reaches this server and knows its id, without a token")
	}
	s.front = s.withConsole(o.Console)
	return s, nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// limits is the per-sandbox memory and CPU of a team's sandboxes: the
// team's quota, else the server's Config.
func (s *Server) limits(q Quota) (Quota, error) {
	if q.Memory == 0 {
		q.Memory = s.cfg.Memory
	}
	if q.CPU == 0 {
		q.CPU = s.cfg.CPU
	}
	switch {
	case q.Sandboxes < 0 || q.Memory < 0 || q.CPU < 0 || q.TotalMemory < 0 || q.TotalCPU < 0 || q.CreatesPerMinute < 0:
		return q, errors.New("e2bserver: quotas must not be negative")
	case q.TotalMemory > 0 && q.Memory == 0:
		return q, errors.New("e2bserver: a total memory quota needs a memory limit per sandbox (--memory)")
	case q.TotalCPU > 0 && q.CPU == 0:
		return q, errors.New("e2bserver: a total CPU quota needs a CPU limit per sandbox (--cpu)")
	case q.TotalMemory > 0 && q.Memory > q.TotalMemory:
		return q, fmt.Errorf("e2bserver: the memory of one sandbox (%d bytes) is more than the team's total (%d bytes)", q.Memory, q.TotalMemory)
	case q.TotalCPU > 0 && q.CPU > q.TotalCPU:
		return q, fmt.Errorf("e2bserver: the CPU of one sandbox (%g) is more than the team's total (%g)", q.CPU, q.TotalCPU)
	}
	return q, nil
}

// SetKeys replaces the accepted keys (serve calls it on SIGHUP with the
// re-read key file). Sandboxes stay with their team; a team whose keys are
// all gone keeps its sandboxes until they end, unreachable by API.
func (s *Server) SetKeys(keys []Key) error {
	if len(keys) == 0 {
		return errors.New("e2bserver: at least one API key is required")
	}
	out := make([]Key, 0, len(keys))
	seen := map[string]bool{}
	quotas := map[string]*Quota{}
	for _, k := range keys {
		if !ValidAPIKey(k.Key) {
			// The SDKs refuse such a key before sending it, so a server that
			// accepted it would be unusable; say so at start instead.
			return fmt.Errorf("e2bserver: API key %q…: must match ^e2b_[0-9a-f]+$ (the E2B SDKs check this)", prefix(k.Key, 6))
		}
		if seen[k.Key] {
			return fmt.Errorf("e2bserver: API key %s… is given twice", prefix(k.Key, 8))
		}
		seen[k.Key] = true
		if k.Team == "" {
			k.Team = "key-" + keyID(k.Key)
		} else if !ValidTeam(k.Team) {
			return fmt.Errorf("e2bserver: team name %q: use letters, digits, '.', '_', '-' (at most 63)", k.Team)
		}
		if k.Quota != nil {
			if q, ok := quotas[k.Team]; ok && *q != *k.Quota {
				return fmt.Errorf("e2bserver: team %s is given two different quotas", k.Team)
			}
			if _, err := s.limits(*k.Quota); err != nil {
				return fmt.Errorf("team %s: %w", k.Team, err)
			}
			quotas[k.Team] = k.Quota
		}
		out = append(out, k)
	}
	s.keysMu.Lock()
	s.keys = out
	s.keysMu.Unlock()
	s.mu.Lock()
	for _, k := range out {
		q := s.defaultQuota
		if p := quotas[k.Team]; p != nil {
			q = *p
		}
		q, _ = s.limits(q)
		ts := s.teams[k.Team]
		if ts == nil {
			ts = &teamState{}
			s.teams[k.Team] = ts
		}
		if ts.limiter == nil || ts.quota.CreatesPerMinute != q.CreatesPerMinute {
			ts.limiter = nil
			if n := q.CreatesPerMinute; n > 0 {
				ts.limiter = rate.NewLimiter(rate.Limit(float64(n)/60), n)
			}
		}
		ts.quota = q
	}
	s.mu.Unlock()
	return nil
}

// keyID is a short, non-secret fingerprint of a key for logs and default
// team names.
func keyID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

func prefix(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// viaHeader carries the server's mark on every request it forwards.
const viaHeader = "Code-Sandboxes-Via"

// ServeHTTP dispatches between the data plane and the control plane.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for _, v := range r.Header.Values(viaHeader) {
		if subtle.ConstantTimeCompare([]byte(v), []byte(s.via)) == 1 {
			// We forwarded this request into a sandbox and it came back: a
			// tunnel to our own listener. Serving it would loop until the
			// descriptors run out.
			s.metrics.refused.WithLabelValues("loop").Inc()
			writeError(w, http.StatusLoopDetected, "this request already went through this server once (a tunnel to the server itself); refused")
			return
		}
	}
	if id, port, ok := sandboxTarget(r); ok {
		s.proxy.serve(w, r, id, port)
		return
	}
	if r.URL.Path == "/files" && r.URL.Query().Has("signature") {
		// A signed URL that names no sandbox (as the SDKs build it on
		// E2B_SANDBOX_URL): only the signature could say whose it is, and
		// finding out would take one hash per live sandbox of every team,
		// for anyone who asks, with no key. Refused: the request must name
		// its sandbox, and is then checked against that one alone.
		s.metrics.refused.WithLabelValues("token").Inc()
		writeError(w, http.StatusBadRequest, "a signed /files URL must name its sandbox: send it to the host %d-<sandboxID>.<domain> (the URL the SDKs make without E2B_SANDBOX_URL) or with the header E2b-Sandbox-Id: <sandboxID>; this server does not search every sandbox for the one whose token signed it", EnvdPort)
		return
	}
	s.api.ServeHTTP(w, r)
}

// sandboxTarget finds the sandbox and port a data-plane request is for: the
// SDKs' routing headers first, then E2B's host form <port>-<id>.<domain>.
func sandboxTarget(r *http.Request) (id string, port int, ok bool) {
	if id = r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port = EnvdPort
		if p := r.Header.Get("E2b-Sandbox-Port"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				n = -1 // reported by the proxy as a bad request
			}
			port = n
		}
		return id, port, true
	}
	host := r.Host
	if i := strings.IndexByte(host, '.'); i > 0 {
		label := host[:i]
		if p, rest, found := strings.Cut(label, "-"); found && rest != "" {
			if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 65536 && sandboxIDPattern.MatchString(rest) {
				return rest, n, true
			}
		}
	}
	return "", 0, false
}

// sandboxIDPattern is what E2B's proxy accepts and what our variants' ids are.
var sandboxIDPattern = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

// checkKey finds the request's key among the accepted ones, comparing with
// every key in constant time without stopping at the first match, so that
// timing reveals nothing.
func (s *Server) checkKey(r *http.Request) (Key, bool) {
	got := []byte(r.Header.Get("X-API-Key"))
	s.keysMu.RLock()
	defer s.keysMu.RUnlock()
	var found Key
	ok := 0
	for _, k := range s.keys {
		if subtle.ConstantTimeCompare(got, []byte(k.Key)) == 1 {
			found, ok = k, 1
		}
	}
	return found, ok == 1
}

// apiError is E2B's error body; the JS SDK reads its code, not the status.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

func writeError(w http.ResponseWriter, status int, format string, a ...any) {
	writeJSON(w, status, apiError{Code: status, Message: fmt.Sprintf(format, a...)})
}

// newEntry wraps a sandbox handle; nil when the handle has no token (a
// variant without an access token can't be served safely).
func (s *Server) newEntry(sb *sandboxes.Sandbox, team, template string, private bool, mem int64, cpus float64) (*entry, error) {
	inst := driver.InstanceOf(sb)
	if inst == nil || inst.Client() == nil || inst.Client().AccessToken() == "" {
		return nil, fmt.Errorf("sandbox %s has no access token; serve needs one to guard its data plane", sb.ID())
	}
	tok := inst.Client().AccessToken()
	e := &entry{id: sb.ID(), team: team, template: template, sb: sb, inst: inst, token: tok,
		traffic: e2bauth.TrafficToken(tok), private: private, memory: mem, cpus: cpus}
	e.tunnel = s.proxy.tunnelTransport(e)
	u, err := url.Parse(inst.Client().EnvdURL())
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("sandbox %s: the variant's envd URL %q is not a URL", e.id, inst.Client().EnvdURL())
	}
	e.agentScheme, e.agentHost = u.Scheme, u.Host
	return e, nil
}

// lookup returns the entry of id if team may see it ("" = any team).
func (s *Server) lookup(id, team string) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.sandboxes[id]
	if e == nil || (team != "" && e.team != team) {
		return nil
	}
	return e
}

// forget drops a sandbox that ended and frees what we hold for it.
func (s *Server) forget(id string) {
	s.mu.Lock()
	e := s.sandboxes[id]
	delete(s.sandboxes, id)
	s.mu.Unlock()
	if e != nil {
		e.tunnel.CloseIdleConnections()
		_ = e.sb.Detach()
		s.metrics.running.WithLabelValues(e.team).Dec()
	}
}

// Created lists the ids of the live sandboxes this server holds.
func (s *Server) Created() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		out = append(out, id)
	}
	return out
}

// Adopt takes over the sandboxes an earlier server left running (serve
// --keep-sandboxes), with the teams they were created for.
func (s *Server) Adopt(ctx context.Context) error {
	infos, err := sandboxes.List(ctx, s.cfg, sandboxes.ListOptions{})
	if err != nil {
		return err
	}
	var errs []error
	for _, i := range infos {
		t, ok := i.Tags[tagTemplate]
		if !ok || i.Tags[tagTeam] == "" || i.Status != "running" || s.lookup(i.ID, "") != nil {
			continue
		}
		sb, err := sandboxes.Get(ctx, s.cfg, i.ID)
		if err != nil {
			errs = append(errs, fmt.Errorf("adopt %s: %w", i.ID, err))
			continue
		}
		e, err := s.newEntry(sb, i.Tags[tagTeam], t, i.Tags[tagPrivate] == "true", i.Memory, i.CPUs)
		if e != nil {
			if i.Tags[tagInsecure] == "true" {
				// Open without a token only while the operator still allows
				// it; otherwise its envd needs the token again, which
				// connect and details then answer.
				e.insecure = s.allowInsecure
				if !s.allowInsecure {
					s.log.Warn("adopted a sandbox created with secure false; its envd needs its token now (serve runs without "+insecureFlag+")", "sandbox", i.ID, "team", i.Tags[tagTeam])
				}
			}
			e.autoResume = i.Tags[tagAutoResume] == "true"
			e.autoPause = i.Tags[tagOnTimeout] == "pause"
			// Only the policy is known after a restart: a filtered "all"
			// counts as all, never lower.
			l := levelOf(sandboxes.Network{Policy: i.Network})
			e.level.Store(int32(l))
			if l > s.maxNetwork {
				// Adopted so that its team can still see and kill it; it
				// runs with what an earlier server gave it, and a resume or
				// network update above the ceiling is refused.
				s.log.Warn("adopted a sandbox above the network ceiling", "sandbox", i.ID, "team", i.Tags[tagTeam], "network", i.Network, "max_network", levelNames[s.maxNetwork])
			}
		}
		if err != nil {
			_ = sb.Detach()
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		s.sandboxes[e.id] = e
		s.mu.Unlock()
		s.metrics.running.WithLabelValues(e.team).Inc()
		s.log.Info("adopted", "sandbox", e.id, "team", e.team)
	}
	return errors.Join(errs...)
}

// KillCreated kills the sandboxes this server holds; one that is already
// gone counts as killed.
func (s *Server) KillCreated(ctx context.Context) error {
	var errs []error
	for _, id := range s.Created() {
		e := s.lookup(id, "")
		if e == nil {
			continue
		}
		if err := e.inst.Kill(ctx); err != nil && !errors.Is(err, sandboxes.ErrNotFound) {
			errs = append(errs, fmt.Errorf("kill %s: %w", id, err))
			continue
		}
		s.log.Info("killed", "sandbox", id, "team", e.team, "by", "shutdown")
		s.forget(id)
	}
	return errors.Join(errs...)
}
