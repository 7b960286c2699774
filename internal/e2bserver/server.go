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
// The server only exposes sandboxes created through an E2B API (it marks
// them with reserved tags), so sandboxes made with the CLI or the Go API in
// the same runtime directory stay out of reach of API-key holders.
package e2bserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
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
	tagInsecure = tagPrefix + "insecure" // "true": created with secure=false
)

// Templates the server accepts; both are the same local sandbox (our agent
// serves envd and the interpreter alike), but the SDKs pick them by name.
var templates = []string{"base", "code-interpreter-v1"}

// apiKeyPattern is the format the SDKs check client-side before any request.
var apiKeyPattern = regexp.MustCompile(`^e2b_[0-9a-f]+$`)

// ValidAPIKey reports whether key has the shape the official SDKs accept.
func ValidAPIKey(key string) bool { return apiKeyPattern.MatchString(key) }

// Options configure a Server.
type Options struct {
	// APIKeys are the accepted X-API-Key values; at least one, each e2b_<hex>.
	APIKeys []string
	// Config is the base of every sandbox the server creates (variant, runtime
	// directory, limits). Only the local variant is supported: the data plane
	// dials its agent sockets.
	Config sandboxes.Config
	// DefaultNetwork applies when a create request omits allow_internet_access
	// (the JS SDK omits it unless the user sets it): "none" (our safe default)
	// or "all" (E2B's default).
	DefaultNetwork string
	// MaxTimeout bounds a sandbox's timeout (create, setTimeout, connect);
	// default 24h, E2B's longest.
	MaxTimeout time.Duration
	// Logger receives one line per control-plane call; nil = discard.
	Logger *slog.Logger
}

// Server is the E2B-compatible HTTP handler.
type Server struct {
	keys           [][]byte
	cfg            sandboxes.Config
	rt             string
	defaultNetwork string
	maxTimeout     time.Duration
	log            *slog.Logger
	api            http.Handler
	proxy          *dataPlane

	mu      sync.Mutex
	created map[string]bool // ids this server created, for Shutdown
}

// New validates o and returns a Server.
func New(o Options) (*Server, error) {
	if len(o.APIKeys) == 0 {
		return nil, errors.New("e2bserver: at least one API key is required")
	}
	s := &Server{cfg: o.Config, defaultNetwork: o.DefaultNetwork, maxTimeout: o.MaxTimeout, log: o.Logger, created: map[string]bool{}}
	for _, k := range o.APIKeys {
		if !ValidAPIKey(k) {
			// The SDKs refuse such a key before sending it, so a server that
			// accepted it would be unusable; say so at start instead.
			return nil, fmt.Errorf("e2bserver: API key %q…: must match ^e2b_[0-9a-f]+$ (the E2B SDKs check this)", prefix(k, 6))
		}
		s.keys = append(s.keys, []byte(k))
	}
	if v := sandboxes.NormalizeVariant(s.cfg.Variant); v != "" && v != "local" {
		return nil, fmt.Errorf("e2bserver: variant %q: only the local variant is supported (the data plane dials its agent sockets)", s.cfg.Variant)
	}
	s.cfg.Variant = "local"
	// Resolve the runtime directory once, so that the sandboxes we create and
	// the sockets the proxy dials are certainly in the same place.
	s.rt = RuntimeDir(s.cfg.Local.RuntimeDir)
	s.cfg.Local.RuntimeDir = s.rt
	switch s.defaultNetwork {
	case "":
		s.defaultNetwork = sandboxes.NetworkNone
	case sandboxes.NetworkNone, sandboxes.NetworkAll:
	default:
		return nil, fmt.Errorf("e2bserver: default network %q: use none or all", s.defaultNetwork)
	}
	if s.maxTimeout <= 0 {
		s.maxTimeout = 24 * time.Hour
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.api = s.routes()
	s.proxy = newDataPlane(s)
	return s, nil
}

// RuntimeDir resolves the local variant's runtime directory the way the
// variant does (internal/local's runtimeDir, which is unexported).
func RuntimeDir(configured string) string {
	if configured != "" {
		return configured
	}
	if d := os.Getenv("CODE_SANDBOXES_RUNTIME_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/run/code-sandboxes"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "code-sandboxes")
	}
	return filepath.Join(os.TempDir(), "code-sandboxes-"+strconv.Itoa(os.Getuid()))
}

func prefix(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ServeHTTP dispatches between the data plane and the control plane.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id, port, ok := sandboxTarget(r); ok {
		s.proxy.serve(w, r, id, port)
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

// sandboxIDPattern is what E2B's proxy accepts and what local ids are; it
// also keeps an id from naming anything but a directory of the runtime dir.
var sandboxIDPattern = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

// checkKey compares the request's key with every accepted key in constant
// time, without stopping at the first match, so timing reveals nothing.
func (s *Server) checkKey(r *http.Request) bool {
	got := []byte(r.Header.Get("X-API-Key"))
	ok := 0
	for _, k := range s.keys {
		ok |= subtle.ConstantTimeCompare(got, k)
	}
	return ok == 1
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

// track remembers a sandbox this server created.
func (s *Server) track(id string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.created[id] = true
	} else {
		delete(s.created, id)
	}
}

// Created lists the ids of the live sandboxes this server created.
func (s *Server) Created() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.created))
	for id := range s.created {
		out = append(out, id)
	}
	return out
}

// KillCreated kills the sandboxes this server created and still knows of;
// one that is already gone counts as killed.
func (s *Server) KillCreated(ctx context.Context) error {
	var errs []error
	for _, id := range s.Created() {
		if _, err := sandboxes.Kill(ctx, s.cfg, id, sandboxes.ListOptions{}); err != nil && !errors.Is(err, sandboxes.ErrNotFound) {
			errs = append(errs, fmt.Errorf("kill %s: %w", id, err))
			continue
		}
		s.track(id, false)
	}
	s.proxy.closeIdle()
	return errors.Join(errs...)
}
