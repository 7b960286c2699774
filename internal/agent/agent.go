// Package agent is the program that runs inside every sandbox we launch. It
// speaks E2B's data-plane protocols on one listener — envd's Connect RPC
// services and /files, and the code interpreter's /execute and /contexts — so
// that one client serves every variant, plus a few extensions under /x/ that
// E2B's SDKs never call (interrupt, variables, lifetime, port forwarding).
package agent

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/e2bauth"
	"github.com/code-sandboxes/code-sandboxes/internal/idlethreads"
	"github.com/code-sandboxes/code-sandboxes/internal/kernel"
	"github.com/code-sandboxes/code-sandboxes/internal/sandboxenv"
	"github.com/code-sandboxes/code-sandboxes/internal/secs"
)

// Version is what /x/info reports and what an E2B-compatible server can hand
// out as envdVersion: the envd feature level we implement (octet-stream
// uploads, closeStdin, default user, upload metadata 0.6.2, entry info in
// watch events 0.6.3, allow_network_mounts 0.6.4) — see e2b-protocol.md §3.9.
const Version = "0.6.4"

// Config is how the launcher parameterises the agent.
type Config struct {
	ID          string
	AccessToken string // "" = no token required
	Python      string // python interpreter for kernels; "" = look up python3
	Workdir     string // default cwd of contexts and processes
	Env         map[string]string
	// Lifetime is how long the sandbox may live from start; 0 = forever.
	// SetTimeout (POST /x/timeout) restarts the countdown from now.
	Lifetime time.Duration
	// IdleTimeout ends the sandbox after this long without use (0 = never):
	// a request in flight (an execution, a command's stream, a forwarded
	// connection) is use for as long as it lasts; /health and /x/info,
	// which monitors poll, are not.
	IdleTimeout time.Duration
	Logger      *slog.Logger
	// Routes lets the caller mount more handlers (the envd services) behind
	// the same auth middleware.
	Routes map[string]http.Handler
	// OnClose runs when the agent shuts down (ends envd's processes).
	OnClose func()
	// Prewarm starts the default python context's kernel as soon as the
	// agent serves, as E2B's code-interpreter template does with its Jupyter
	// kernel: the first RunCode then skips the interpreter's start-up.
	Prewarm bool
	// Quiesce, when set, lets the host checkpoint the sandbox (quiesce.go).
	Quiesce *Quiesce
	// ProtocolPipe makes the kernels' command and event pipes
	// (kernel.Options.ProtocolPipe); nil = os.Pipe.
	ProtocolPipe func() (r, w *os.File, err error)
	// EarlyKernel is the default python context's kernel, started before
	// the agent with sandboxenv.DefaultKernelOptions (the sandbox's stage 1 does):
	// the context's first start adopts it. Needs ToolsSocket, the path
	// those options were made with.
	EarlyKernel *kernel.Early
	// ToolsSocket is the tools socket's path; "" = a fresh one
	// (sandboxenv.NewToolsSocketPath).
	ToolsSocket string
}

// Server is one agent.
type Server struct {
	cfg      Config
	contexts *contextTable
	tools    *toolHub
	mux      *http.ServeMux
	started  time.Time

	prewarmOnce sync.Once

	mu       sync.Mutex
	deadline time.Time
	timer    *time.Timer
	expired  chan struct{}
	lastUsed time.Time
	once     sync.Once
	inFlight int           // requests (and forwarded connections) in progress
	idleFor  time.Duration // the idle timeout; 0 = none
	idle     *time.Timer   // armed while nothing is in flight
}

// SingleThreaded limits the calling process to one Go P unless GOMAXPROCS
// is set: an agent is I/O-bound and its hops between the client, the kernel's
// pipes and the HTTP stream cost less on one thread (the x + 2 round trip
// fell from about 1.05 ms to 0.7 ms here), and a host running hundreds of
// sandboxes wants fewer threads per sandbox.
//
// It also starts a few OS threads up front and parks them: the sandbox's pids
// limit counts threads, and an agent that needs a new thread for a blocking
// syscall while a fork bomb holds every pid would die ("failed to create new
// OS thread") instead of reporting the bomb. Four, not the eight it kept
// before: with a fork bomb holding every pid under a 0.5 CPU quota, sixteen
// concurrent RunCode and file writes ran on 4-5 distinct agent threads in
// all (sysmon and the poller's included), and every spare is a thread per
// idle sandbox on the host (issue 17: pids, kernel stacks, pivot_root's
// walk over every thread). TestLocalIdleThreads bounds the agent's threads.
func SingleThreaded() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	idlethreads.Keep(4)
}

// New builds an agent; Serve runs it.
func New(cfg Config) *Server {
	if cfg.Workdir == "" {
		cfg.Workdir = "/home/user"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{cfg: cfg, started: time.Now(), expired: make(chan struct{}), lastUsed: time.Now()}
	sock := cfg.ToolsSocket
	if sock == "" {
		sock = sandboxenv.NewToolsSocketPath()
	}
	s.tools = newToolHub(sock)
	env := sandboxenv.KernelEnv(cfg.Env, sock)
	early := cfg.EarlyKernel
	s.contexts = newContextTable(func(language, cwd string) (*kernel.Session, error) {
		if err := kernel.CheckLanguage(context.Background(), language, env); err != nil {
			return nil, err
		}
		o := kernelOptions(cfg, env, language, cwd)
		if early != nil && language == "python" && cwd == cfg.Workdir {
			// The default python context (the first with its options):
			// its kernel is running already.
			o.Early, early = early, nil
		}
		return kernel.NewSession(o), nil
	})
	s.mux = http.NewServeMux()
	s.routes()
	if cfg.Lifetime > 0 {
		s.setDeadline(time.Now().Add(cfg.Lifetime))
	}
	if cfg.IdleTimeout > 0 {
		s.setIdleTimeout(cfg.IdleTimeout)
	}
	return s
}

func kernelOptions(cfg Config, env []string, language, cwd string) kernel.Options {
	o := sandboxenv.KernelOptions(cfg.Python, env, language, cwd)
	o.ProtocolPipe = cfg.ProtocolPipe
	return o
}

// begin and end bracket a use of the sandbox: the idle clock stops while
// anything is in flight and restarts from the end of the last use.
func (s *Server) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight++
	s.lastUsed = time.Now()
	if s.idle != nil {
		s.idle.Stop()
	}
}

func (s *Server) end() {
	s.mu.Lock()
	s.inFlight--
	s.lastUsed = time.Now()
	if s.inFlight == 0 && s.idle != nil {
		s.idle.Reset(s.idleFor)
	}
	s.mu.Unlock()
}

// setIdleTimeout (re)starts the idle clock with d (a warm-pool sandbox
// gets its idle timeout when claimed).
func (s *Server) setIdleTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idleFor = d
	if s.idle == nil {
		s.idle = time.AfterFunc(d, s.idleCheck)
		s.idle.Stop()
	}
	if s.inFlight == 0 {
		s.idle.Reset(d)
	}
}

// idleCheck runs when the idle timer fires; a use that began meanwhile
// wins (Stop can't recall a timer that already fired).
func (s *Server) idleCheck() {
	s.mu.Lock()
	d := s.idleFor
	idle := d > 0 && s.inFlight == 0 && time.Since(s.lastUsed) >= d
	s.mu.Unlock()
	if idle {
		s.cfg.Logger.Info("idle timeout: ending the sandbox", "idle_timeout", d)
		s.expire()
	}
}

// inUse counts a request as use of the sandbox, except the probes that
// monitors and launchers poll. (It counts with or without an idle timeout:
// one may be set later, when a warm-pool sandbox is claimed.)
func (s *Server) inUse(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/x/info" || r.URL.Path == "/x/warm" {
			next.ServeHTTP(w, r)
			return
		}
		s.begin()
		defer s.end()
		next.ServeHTTP(w, r)
	})
}

// Expired is closed when the sandbox's lifetime has passed or /x/shutdown was
// called; the launcher then exits, which ends every process in the sandbox.
func (s *Server) Expired() <-chan struct{} { return s.expired }

func (s *Server) expire() { s.once.Do(func() { close(s.expired) }) }

func (s *Server) setDeadline(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = t
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(time.Until(t), s.expire)
}

func (s *Server) touch() {
	s.mu.Lock()
	s.lastUsed = time.Now()
	s.mu.Unlock()
}

// Handler is the agent's whole HTTP surface, with auth applied.
func (s *Server) Handler() http.Handler { return s.auth(s.inUse(s.mux)) }

// Close kills every kernel.
func (s *Server) Close() {
	s.tools.close()
	s.contexts.closeAll()
	if s.cfg.EarlyKernel != nil {
		s.cfg.EarlyKernel.Close() // if no context took it
	}
	if s.cfg.OnClose != nil {
		s.cfg.OnClose()
	}
	s.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.idle != nil {
		s.idle.Stop()
	}
	s.mu.Unlock()
}

// StartPrewarm starts the default python context's kernel in the
// background (once: later calls, and Serve's with Config.Prewarm, do
// nothing), so a caller can start it before the rest of its own start-up.
func (s *Server) StartPrewarm(ctx context.Context) {
	s.prewarmOnce.Do(func() {
		go func() {
			c, err := s.contexts.defaultFor("python", s.cfg.Workdir)
			if err == nil {
				pctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				if err := c.session.Start(pctx); err != nil {
					s.cfg.Logger.Warn("prewarming the default kernel failed", "err", err)
				}
			}
		}()
	})
}

// Serve answers on ln until ctx is done or the lifetime expires.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var q Quiesce
	if s.cfg.Quiesce != nil {
		q = *s.cfg.Quiesce
	}
	var hs *http.Server
	var errc chan error
	var tl *trackingListener
	serve := func(ln net.Listener) {
		hs = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 30 * time.Second, MaxHeaderBytes: 1 << 20}
		errc = make(chan error, 1)
		tl = newTrackingListener(ln)
		go func() { errc <- hs.Serve(tl) }()
	}
	serve(ln)
	if s.cfg.Prewarm {
		s.StartPrewarm(ctx)
	}
	// A quiesce (nil channels without one) goes round again.
	for quiesced := true; quiesced; {
		quiesced = false
		select {
		case <-ctx.Done():
		case <-s.expired:
		case err := <-errc:
			s.Close()
			return err
		case <-q.Request:
			_ = hs.Close()
			tl.closeAll()
			<-errc // http.ErrServerClosed
			q.Done()
		waitResume:
			for {
				select {
				case <-ctx.Done():
					s.Close()
					return nil
				case <-s.expired:
					s.Close()
					return nil
				case <-q.Request:
					// Asked again (the sandbox's code may have quiesced us
					// before the host did): still quiesced, say so again.
					q.Done()
				case <-q.Resume:
					break waitResume
				}
			}
			ln, err := q.Relisten()
			if err != nil {
				s.Close()
				return fmt.Errorf("listen again after a restore: %w", err)
			}
			if q.Identity != nil {
				// Nothing is served now: the old server and its
				// connections are closed, the new one not started.
				if id, tok, ok := q.Identity(); ok {
					s.cfg.ID, s.cfg.AccessToken = id, tok
				}
			}
			serve(ln)
			quiesced = true
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	s.Close()
	return nil
}

// auth checks the envd access token on everything but /health (how a host
// learns the sandbox is up), as envd does. Two requests may prove it
// otherwise, as with E2B, so that a proxy in front never has to add the
// token itself: a /files URL signed with it (the SDKs' uploadUrl and
// downloadUrl), and the interpreter's /contexts calls carrying the traffic
// access token derived from it (the code interpreter SDKs send that one
// there, not X-Access-Token).
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := s.cfg.AccessToken; tok != "" && r.URL.Path != "/health" {
			got := r.Header.Get("X-Access-Token")
			ok := subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1
			if !ok && got == "" {
				switch {
				case r.URL.Path == "/files" && r.URL.Query().Has("signature"):
					if err := e2bauth.CheckFileSignature(r.Method, r.URL.Query(), tok, time.Now()); err != nil {
						msg := err.Error()
						if errors.Is(err, e2bauth.ErrSignatureExpired) {
							msg = e2bauth.ErrSignatureExpired.Error() // envd's words
						}
						writeJSONError(w, http.StatusUnauthorized, msg)
						return
					}
					// The signature covers the query's user (none: the
					// default user), never a user named by a header the
					// URL's holder adds (Basic root: would make a plain
					// user's URL act as root).
					r.Header.Del("Authorization")
					ok = true
				case r.URL.Path == "/contexts" || strings.HasPrefix(r.URL.Path, "/contexts/"):
					ok = e2bauth.Equal(r.Header.Get(e2bauth.TrafficHeader), e2bauth.TrafficToken(tok))
				}
			}
			if !ok {
				writeJSONError(w, http.StatusUnauthorized, "unauthorized access, please provide a valid access token (X-Access-Token)")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeJSONError answers with envd's error body: {"code": <status>, "message": …}.
func writeJSONError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

func (s *Server) routes() {
	m := s.mux
	for p, h := range s.cfg.Routes {
		m.Handle(p, h)
	}
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	m.HandleFunc("POST /execute", s.handleExecute)
	m.HandleFunc("GET /contexts", func(w http.ResponseWriter, r *http.Request) {
		// E2B's code interpreter starts with a default python and javascript
		// context; ours are created on first use, and listed as if they were
		// there from the start (their kernels still start lazily).
		for _, lang := range []string{"python", "javascript"} {
			_, _ = s.contexts.defaultFor(lang, s.cfg.Workdir) // javascript only where node is installed
		}
		writeJSON(w, http.StatusOK, s.contexts.list())
	})
	m.HandleFunc("POST /contexts", s.handleCreateContext)
	m.HandleFunc("DELETE /contexts/{id}", func(w http.ResponseWriter, r *http.Request) {
		c := s.contexts.remove(r.PathValue("id"))
		if c == nil {
			textError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", r.PathValue("id")))
			return
		}
		_ = c.session.Close()
		writeJSON(w, http.StatusOK, nil)
	})
	m.HandleFunc("POST /contexts/{id}/restart", func(w http.ResponseWriter, r *http.Request) {
		c := s.contexts.get(r.PathValue("id"))
		if c == nil {
			textError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", r.PathValue("id")))
			return
		}
		if err := c.session.Restart(r.Context()); err != nil {
			textError(w, http.StatusInternalServerError, "restart failed: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, nil)
	})
	m.HandleFunc("GET /envs", func(w http.ResponseWriter, r *http.Request) {
		env := s.cfg.Env
		if env == nil {
			env = map[string]string{}
		}
		writeJSON(w, http.StatusOK, env)
	})

	// Extensions (documented in docs/agent-protocol.md).
	m.HandleFunc("POST /x/contexts/{id}/interrupt", func(w http.ResponseWriter, r *http.Request) {
		c := s.contextOrDefault(w, r)
		if c == nil {
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"interrupted": c.session.Interrupt()})
	})
	m.HandleFunc("GET /x/contexts/{id}/variables/{name}", s.handleGetVariable)
	m.HandleFunc("PUT /x/contexts/{id}/variables/{name}", s.handleSetVariable)
	m.HandleFunc("GET /x/info", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.info()) })
	m.HandleFunc("POST /x/timeout", s.handleTimeout)
	// The warm pool asks for this before it counts a sandbox as ready, so a
	// claimer's first cell meets a running kernel, not one still starting
	// (the prewarm started at Serve is usually mid-way when the agent first
	// answers). Idempotent: it starts the default python kernel (or waits for
	// the start in progress) and answers once the kernel has answered a
	// no-op command, bounded by the request's context.
	m.HandleFunc("POST /x/warm", func(w http.ResponseWriter, r *http.Request) {
		c, err := s.contexts.defaultFor("python", s.cfg.Workdir)
		if err == nil {
			err = c.session.Warm(r.Context())
		}
		if err != nil {
			writeJSONError(w, http.StatusInternalServerError, "starting the default python kernel: "+err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("POST /x/shutdown", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		go func() { time.Sleep(50 * time.Millisecond); s.expire() }()
	})
	m.HandleFunc("GET /x/forward/{port}", s.handleForward)
	m.HandleFunc("GET /x/exec", s.handleExecConn)
	m.HandleFunc("POST /x/tools", s.handleTools)
	m.HandleFunc("POST /x/tools/calls/{id}", s.handleToolResult)
}

// Info is what GET /x/info answers.
type Info struct {
	ID        string    `json:"id"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	EndAt     time.Time `json:"end_at,omitzero"`
	LastUsed  time.Time `json:"last_used"`
	Contexts  int       `json:"contexts"`
	Pid       int       `json:"pid"`
}

func (s *Server) info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Info{ID: s.cfg.ID, Version: Version, StartedAt: s.started, EndAt: s.deadline, LastUsed: s.lastUsed,
		Contexts: len(s.contexts.list()), Pid: os.Getpid()}
}

func (s *Server) handleCreateContext(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			textError(w, http.StatusBadRequest, "invalid context request: "+err.Error())
			return
		}
	}
	if req.Cwd == "" {
		req.Cwd = s.cfg.Workdir
	}
	if st, err := os.Stat(req.Cwd); err != nil || !st.IsDir() {
		textError(w, http.StatusBadRequest, fmt.Sprintf("cwd %q is not a directory in the sandbox", req.Cwd))
		return
	}
	c, err := s.contexts.create(req.Language, req.Cwd)
	switch {
	case errors.Is(err, errUnsupportedLanguage), errors.Is(err, errTooManyContexts):
		textError(w, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		textError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// contextOrDefault resolves {id}; "default" names the default python context.
func (s *Server) contextOrDefault(w http.ResponseWriter, r *http.Request) *codeContext {
	id := r.PathValue("id")
	if id == "default" {
		c, err := s.contexts.defaultFor("python", s.cfg.Workdir)
		if err != nil {
			textError(w, http.StatusInternalServerError, err.Error())
			return nil
		}
		return c
	}
	c := s.contexts.get(id)
	if c == nil {
		textError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
	}
	return c
}

func (s *Server) handleGetVariable(w http.ResponseWriter, r *http.Request) {
	c := s.contextOrDefault(w, r)
	if c == nil {
		return
	}
	v, isRepr, err := c.session.GetVariable(r.Context(), r.PathValue("name"))
	if err != nil {
		writeJSONError(w, variableStatus(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"value": v, "repr": isRepr})
}

func (s *Server) handleSetVariable(w http.ResponseWriter, r *http.Request) {
	c := s.contextOrDefault(w, r)
	if c == nil {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		writeJSONError(w, http.StatusRequestEntityTooLarge, "variable value too large (limit 64 MiB): "+err.Error())
		return
	}
	set := c.session.SetVariable
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/octet-stream" {
		// The body is the bytes themselves.
		set = func(ctx context.Context, name string, v json.RawMessage) error {
			return c.session.SetVariableBytes(ctx, name, v)
		}
	} else if !json.Valid(body) {
		writeJSONError(w, http.StatusBadRequest, "the body must be the variable's value as JSON (or raw bytes with Content-Type application/octet-stream)")
		return
	}
	if err := set(r.Context(), r.PathValue("name"), body); err != nil {
		writeJSONError(w, variableStatus(err), err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func variableStatus(err error) int {
	switch {
	case errors.Is(err, kernel.ErrVariableNotFound):
		return http.StatusNotFound
	case errors.Is(err, kernel.ErrInvalidName), errors.Is(err, kernel.ErrUnsendable):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func (s *Server) handleTimeout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout     float64 `json:"timeout"`      // seconds, as E2B's API
		IdleTimeout float64 `json:"idle_timeout"` // seconds; sets or changes the idle timeout
	}
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req)
	if err != nil || req.Timeout < 0 || req.IdleTimeout < 0 || (req.Timeout == 0 && req.IdleTimeout == 0) {
		writeJSONError(w, http.StatusBadRequest, `send {"timeout": <seconds>} and/or {"idle_timeout": <seconds>}, each > 0`)
		return
	}
	// Saturating: 1e300 seconds overflowed into the past and ended the sandbox.
	if req.Timeout > 0 {
		s.setDeadline(secs.After(time.Now(), secs.Duration(req.Timeout)))
	}
	if req.IdleTimeout > 0 {
		s.setIdleTimeout(secs.Duration(req.IdleTimeout))
	}
	writeJSON(w, http.StatusOK, s.info())
}

// handleForward upgrades the connection to a raw TCP tunnel to a port inside
// the sandbox's network namespace, which is how Host(port) reaches a server
// in a sandbox whose network is "none".
func (s *Server) handleForward(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeJSONError(w, http.StatusBadRequest, "port must be 1-65535")
		return
	}
	up, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		writeJSONError(w, http.StatusBadGateway, fmt.Sprintf("nothing listens on port %d in the sandbox: %v", port, err))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		writeJSONError(w, http.StatusInternalServerError, "cannot upgrade this connection: "+err.Error())
		return
	}
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		up.Close()
		return
	}
	s.touch()
	// A forwarded connection is use for as long as it stays open (the
	// request that opened it has returned once it is hijacked).
	s.begin()
	go func() {
		defer s.end()
		splice(conn, brw.Reader, up)
	}()
}

func splice(down net.Conn, downReader io.Reader, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, downReader); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, up); closeWrite(down); done <- struct{}{} }()
	<-done
	<-done
	down.Close()
	up.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
