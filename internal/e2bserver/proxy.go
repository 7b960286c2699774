package e2bserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
)

// maxProxyBody bounds data-plane request bodies other than /files uploads
// (which stream to disk): Connect RPC messages and /execute code. The agent
// bounds /execute itself at 8 MiB; stdin chunks and RPCs are far smaller.
const maxProxyBody = 32 << 20

// dialHost is the fake host name the proxy gives each upstream: the transport
// pools connections per host, so one name per sandbox and port keeps a
// sandbox's connections apart from every other's.
const dialHost = ".sandbox"

// dataPlane reverse-proxies to the sandboxes' agents.
type dataPlane struct {
	s  *Server
	tr *http.Transport
	rp *httputil.ReverseProxy
}

type targetKey struct{}

type target struct {
	id   string
	port int
}

func newDataPlane(s *Server) *dataPlane {
	p := &dataPlane{s: s}
	p.tr = &http.Transport{
		DialContext:         p.dial,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		// The SDKs bound their own requests; a long-running execution or a
		// process stream must not be cut by the proxy waiting for headers
		// (a command's Start answers headers only once it started).
		ResponseHeaderTimeout: 0,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(target)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = t.id + "-" + strconv.Itoa(t.port) + dialHost
			pr.Out.Host = ""
		},
		Transport: p.tr,
		// NDJSON executions and Connect streams must reach the SDK live.
		FlushInterval: -1,
		ErrorHandler:  p.proxyError,
	}
	return p
}

func (p *dataPlane) closeIdle() { p.tr.CloseIdleConnections() }

// sandboxGone is what E2B's edge proxy answers for an unknown or ended
// sandbox; the SDKs turn a 502 into "the sandbox was killed or timed out".
func sandboxGone(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": http.StatusBadGateway})
}

func (p *dataPlane) serve(w http.ResponseWriter, r *http.Request, id string, port int) {
	if port < 1 {
		writeError(w, http.StatusBadRequest, "E2b-Sandbox-Port %q is not a port number", r.Header.Get("E2b-Sandbox-Port"))
		return
	}
	if !sandboxIDPattern.MatchString(id) {
		sandboxGone(w, id)
		return
	}
	rec, err := p.s.record(id)
	if err != nil {
		sandboxGone(w, id)
		return
	}
	agent := port == EnvdPort || port == InterpreterPort
	if agent && r.Header.Get("X-Access-Token") == "" {
		// The agent checks the token on everything but /health. E2B has no
		// check where its SDKs send none: on a sandbox created with
		// secure=false, and on the interpreter's /contexts calls (E2B's
		// interpreter server has no auth of its own; its SDK only sends the
		// token with /execute). There the server vouches for the request.
		if rec.insecure() || (port == InterpreterPort && (r.URL.Path == "/contexts" || strings.HasPrefix(r.URL.Path, "/contexts/"))) {
			r.Header.Set("X-Access-Token", rec.Token)
		}
	}
	if agent && !(r.URL.Path == "/files" && r.Method == http.MethodPost) {
		if r.ContentLength > maxProxyBody {
			writeError(w, http.StatusRequestEntityTooLarge, "request body of %d bytes is larger than %d bytes", r.ContentLength, maxProxyBody)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxProxyBody)
	}
	ctx := context.WithValue(r.Context(), targetKey{}, target{id: id, port: port})
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

func (p *dataPlane) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(target)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", mbe.Limit)
	case r.Context().Err() != nil:
		// The client went away; nobody is left to answer.
		w.WriteHeader(499)
	case t.port != EnvdPort && t.port != InterpreterPort && p.s.alive(t.id):
		writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": t.id, "port": t.port, "code": http.StatusBadGateway,
			"message": fmt.Sprintf("nothing answers on port %d in the sandbox: %v", t.port, err)})
	default:
		p.s.log.Debug("proxy", "sandbox", t.id, "port", t.port, "error", err)
		sandboxGone(w, t.id)
	}
}

// dial connects to the agent socket of the sandbox the fake host names, or,
// for any other port, tunnels through the agent to that port inside the
// sandbox (which works with network none too).
func (p *dataPlane) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	name, ok := strings.CutSuffix(host, dialHost)
	i := strings.LastIndexByte(name, '-')
	if !ok || i < 0 {
		return nil, fmt.Errorf("unexpected upstream %q", addr)
	}
	id := name[:i]
	port, err := strconv.Atoi(name[i+1:])
	if err != nil || !sandboxIDPattern.MatchString(id) {
		return nil, fmt.Errorf("unexpected upstream %q", addr)
	}
	sock := filepath.Join(p.s.rt, id, "agent.sock")
	if port == EnvdPort || port == InterpreterPort {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	rec, err := p.s.record(id)
	if err != nil {
		return nil, err
	}
	c := client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: client.UnixHTTPClient(sock), AccessToken: rec.Token})
	return c.DialPort(ctx, port)
}

// agentRecord is the part of the local variant's state.json the proxy needs.
// internal/local keeps its record type unexported; the file's format is
// shared by every process that reaches a sandbox, so reading it is stable.
type agentRecord struct {
	ID    string            `json:"id"`
	Token string            `json:"token"`
	Tags  map[string]string `json:"tags"`
}

func (a *agentRecord) insecure() bool { return a.Tags[tagInsecure] == "true" }

// record reads the record of one of our sandboxes; sandboxes not created
// through the E2B API are reported as missing.
func (s *Server) record(id string) (*agentRecord, error) {
	if !sandboxIDPattern.MatchString(id) {
		return nil, os.ErrNotExist
	}
	b, err := os.ReadFile(filepath.Join(s.rt, id, "state.json"))
	if err != nil {
		return nil, err
	}
	var rec agentRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if _, ok := rec.Tags[tagTemplate]; !ok || rec.Token == "" {
		return nil, os.ErrNotExist
	}
	return &rec, nil
}

func (s *Server) alive(id string) bool {
	_, err := s.record(id)
	return err == nil
}

func (s *Server) token(id string) (string, error) {
	rec, err := s.record(id)
	if err != nil {
		return "", err
	}
	return rec.Token, nil
}
