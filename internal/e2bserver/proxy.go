package e2bserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/e2bauth"
)

// maxProxyBody bounds data-plane request bodies other than /files uploads
// (which stream to disk): Connect RPC messages and /execute code. The agent
// bounds /execute itself at 8 MiB; stdin chunks and RPCs are far smaller.
const maxProxyBody = 32 << 20

// tunnelHost is the fake host name of a tunnel upstream: the entry's
// transport pools connections per host, so one name per port.
const tunnelHost = ".tunnel"

// Headers that address or authenticate to this server, never to anything in
// a sandbox: they are removed before a request is forwarded.
var routingHeaders = []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", "X-API-Key", viaHeader}

// dataPlane reverse-proxies to the sandboxes' agents, through each
// sandbox's own variant-provided client.
type dataPlane struct {
	s  *Server
	rp *httputil.ReverseProxy
}

type targetKey struct{}

type target struct {
	e    *entry
	port int
}

func (t target) agent() bool { return t.port == EnvdPort || t.port == InterpreterPort }

func newDataPlane(s *Server) *dataPlane {
	p := &dataPlane{s: s}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(target)
			if t.agent() {
				// The variant's client knows how to reach the agent (unix
				// socket, container, port-forward); its URL names it.
				pr.Out.URL.Scheme, pr.Out.URL.Host = t.e.agentScheme, t.e.agentHost
			} else {
				pr.Out.URL.Scheme = "http"
				pr.Out.URL.Host = "p" + strconv.Itoa(t.port) + tunnelHost
				pr.Out.Header.Del(e2bauth.TrafficHeader)
			}
			pr.Out.Host = ""
			if st := t.e.net.Load(); st != nil && st.mask != "" && !t.agent() {
				// maskRequestHost: what the user's server sees as Host.
				pr.Out.Host = maskHost(st.mask, t.port)
			}
			for _, h := range routingHeaders {
				pr.Out.Header.Del(h)
			}
			if t.agent() && t.e.insecure {
				// secure: false, allowed by the operator: the agent still
				// checks its token, which only serve holds; authorize let
				// the request in without one.
				pr.Out.Header.Set("X-Access-Token", t.e.token)
			}
			pr.Out.Header.Set(viaHeader, s.via)
		},
		Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			t := r.Context().Value(targetKey{}).(target)
			start := time.Now()
			var resp *http.Response
			var err error
			kind := "envd"
			if t.agent() {
				resp, err = t.e.inst.Client().HTTPClient().Transport.RoundTrip(r)
			} else {
				kind = "tunnel"
				resp, err = t.e.tunnel.RoundTrip(r)
			}
			status := "error"
			if err == nil {
				status = strconv.Itoa(resp.StatusCode)
			}
			s.metrics.dataPath.WithLabelValues(kind, status).Observe(time.Since(start).Seconds())
			return resp, err
		}),
		// NDJSON executions and Connect streams must reach the SDK live.
		FlushInterval: -1,
		ErrorHandler:  p.proxyError,
	}
	return p
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// tunnelTransport pools the connections to the ports of one sandbox; each
// is dialed through the variant's client (the agent's /x/forward), which
// works with network none too.
func (p *dataPlane) tunnelTransport(e *entry) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			ps, ok := strings.CutSuffix(host, tunnelHost)
			port, err := strconv.Atoi(strings.TrimPrefix(ps, "p"))
			if !ok || err != nil {
				return nil, fmt.Errorf("unexpected upstream %q", addr)
			}
			return e.inst.Client().DialPort(ctx, port)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		// The SDKs bound their own requests; a long-running request to a
		// user's server must not be cut by the proxy waiting for headers.
		ResponseHeaderTimeout: 0,
	}
}

// sandboxGone is what E2B's edge proxy answers for an unknown or ended
// sandbox; the SDKs turn a 502 into "the sandbox was killed or timed out".
// sandboxPaused answers traffic to a paused sandbox as E2B's proxy does a
// sandbox it can't reach (502, which the SDK's isRunning reads as false),
// saying how to resume it.
func sandboxPaused(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox is paused: connect to it (Sandbox.connect) to resume it", "code": http.StatusBadGateway})
}

func sandboxGone(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": http.StatusBadGateway})
}

// authorize applies E2B's rules for who may reach a port of a sandbox:
// envd and the interpreter need the envd access token (or what the agent
// accepts instead: a signed /files URL, the traffic token on /contexts);
// other ports are public unless the sandbox is private or the server
// requires traffic tokens, then they need the traffic token. It answers
// the refusal itself. The proxy only checks what the agent checks again; it
// never adds a credential, but to an insecure sandbox's requests (created
// with secure: false on a server that allows it, as E2B's envd without a
// token): those pass here, and the proxy sends the token.
func (p *dataPlane) authorize(w http.ResponseWriter, r *http.Request, e *entry, port int) bool {
	if port == EnvdPort || port == InterpreterPort {
		if isHealth(r, port) || e.insecure {
			return true
		}
		tok := r.Header.Get("X-Access-Token")
		switch {
		case e2bauth.Equal(tok, e.token):
			return true
		case tok == "" && r.URL.Path == "/files" && r.URL.Query().Has("signature"):
			p.s.sigChecks.Add(1)
			err := e2bauth.CheckFileSignature(r.Method, r.URL.Query(), e.token, time.Now())
			if err == nil {
				return true
			}
			if errors.Is(err, e2bauth.ErrSignatureExpired) {
				// A URL this sandbox signed, past its time: envd's answer.
				p.s.metrics.refused.WithLabelValues("token").Inc()
				writeError(w, http.StatusUnauthorized, "%s", e2bauth.ErrSignatureExpired.Error())
				return false
			}
		case tok == "" && (r.URL.Path == "/contexts" || strings.HasPrefix(r.URL.Path, "/contexts/")):
			if e2bauth.Equal(r.Header.Get(e2bauth.TrafficHeader), e.traffic) {
				return true
			}
		}
		p.s.metrics.refused.WithLabelValues("token").Inc()
		writeError(w, http.StatusUnauthorized, "port %d of sandbox %s needs the sandbox's envdAccessToken in X-Access-Token", port, e.id)
		return false
	}
	if !e.private && !p.s.requireTraffic {
		return true
	}
	if e2bauth.Equal(r.Header.Get(e2bauth.TrafficHeader), e.traffic) {
		return true
	}
	p.s.metrics.refused.WithLabelValues("traffic_token").Inc()
	writeError(w, http.StatusForbidden, "port %d of sandbox %s needs the sandbox's trafficAccessToken in %s", port, e.id, e2bauth.TrafficHeader)
	return false
}

func (p *dataPlane) serve(w http.ResponseWriter, r *http.Request, id string, port int) {
	if port < 1 {
		writeError(w, http.StatusBadRequest, "E2b-Sandbox-Port %q is not a port number", r.Header.Get("E2b-Sandbox-Port"))
		return
	}
	e := p.s.lookup(id, "")
	if e == nil {
		sandboxGone(w, id)
		return
	}
	p.serveEntry(w, r, e, port)
}

// maxInflight bounds the data-plane requests open to one sandbox at once:
// a program in a sandbox that strips the server's mark and sends requests
// back through the server (a loop the mark can't see) exhausts its own
// allowance, not the server's descriptors.
const maxInflight = 512

func (p *dataPlane) serveEntry(w http.ResponseWriter, r *http.Request, e *entry, port int) {
	if !p.authorize(w, r, e, port) {
		return
	}
	if e.autoResume {
		if !p.s.wake(w, r, e, port) {
			return
		}
	} else if e.autoPause && p.s.pausedNow(r.Context(), e) {
		// Details say paused from the moment the timeout's pause begins,
		// while the checkpoint may still run and the agent still answer:
		// traffic must agree with details (the SDK's isRunning is false).
		sandboxPaused(w, e.id)
		return
	}
	if e.inflight.Add(1) > maxInflight {
		e.inflight.Add(-1)
		p.s.metrics.refused.WithLabelValues("inflight").Inc()
		writeError(w, http.StatusTooManyRequests, "sandbox %s has %d requests open already; retry when some are done", e.id, maxInflight)
		return
	}
	defer e.inflight.Add(-1)
	if port == EnvdPort || port == InterpreterPort {
		if !(r.URL.Path == "/files" && r.Method == http.MethodPost) {
			if r.ContentLength > maxProxyBody {
				writeError(w, http.StatusRequestEntityTooLarge, "request body of %d bytes is larger than %d bytes", r.ContentLength, maxProxyBody)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxProxyBody)
		}
	}
	if (port == EnvdPort || port == InterpreterPort) && r.Method == http.MethodPost && r.URL.Path == "/execute" && p.executeLean(w, r, e) {
		return
	}
	ctx := context.WithValue(r.Context(), targetKey{}, target{e: e, port: port})
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

func (p *dataPlane) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(target)
	if t.e != nil && r.Context().Err() == nil {
		// Paused by another process, perhaps: the next request looks.
		t.e.forgetRunning()
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", mbe.Limit)
	case r.Context().Err() != nil:
		// The client went away; nobody is left to answer.
		w.WriteHeader(499)
	case t.e != nil && !t.agent() && p.s.lookup(t.e.id, "") != nil:
		writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": t.e.id, "port": t.port, "code": http.StatusBadGateway,
			"message": fmt.Sprintf("nothing answers on port %d in the sandbox: %v", t.port, err)})
	default:
		id := ""
		if t.e != nil {
			id = t.e.id
		}
		p.s.log.Debug("proxy", "sandbox", id, "port", t.port, "error", err)
		sandboxGone(w, id)
	}
}
