// Package client is the Go client of the sandbox data-plane protocol: E2B's
// envd (Connect RPC and /files) and code-interpreter (/execute, /contexts)
// APIs, plus our agent's /x/ extensions. Every variant uses it: local, docker
// and kubernetes dial our agent; e2b dials E2B's own servers.
package client

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
	"time"
)

// Options configure a Client.
type Options struct {
	// EnvdURL is the base URL of envd (Connect RPC, /files, /health).
	EnvdURL string
	// InterpreterURL is the base URL of /execute and /contexts; defaults to EnvdURL
	// (our agent serves both on one listener).
	InterpreterURL string
	// HTTPClient carries the requests; nil = a client with sane timeouts.
	HTTPClient *http.Client
	// AccessToken is sent as X-Access-Token.
	AccessToken string
	// EnvdHeaders and InterpreterHeaders are added to every request of each
	// surface (E2B's routing headers, traffic tokens).
	EnvdHeaders, InterpreterHeaders http.Header
	// User, when set, is sent as Basic auth to envd (the user that owns files
	// and runs processes).
	User string
	// MaxLineBytes bounds one NDJSON line (default 64 MiB).
	MaxLineBytes int
	// HeaderTimeout bounds the wait for a response's headers once the
	// request is sent (default DefaultHeaderTimeout); StallTimeout bounds
	// each wait for more bytes of a response body (default
	// DefaultStallTimeout). A hostile or wedged sandbox can't hang a call
	// past them, whatever the caller's context.
	HeaderTimeout, StallTimeout time.Duration
	// Dial, when set, opens a connection to the agent (the same one
	// HTTPClient reaches): Execute then runs over the agent's lean
	// execution connection (execconn.go), not /execute.
	Dial func(ctx context.Context) (net.Conn, error)
}

// Defaults of Options.HeaderTimeout and StallTimeout. An execution stream
// carries a keepalive every 5 s of silence, a download streams: two minutes
// without a byte is a sandbox that stopped answering.
const (
	DefaultHeaderTimeout = 2 * time.Minute
	DefaultStallTimeout  = 2 * time.Minute
)

// Transport timeouts of the clients this package builds (UnixHTTPClient,
// New's default), which also bound the Connect RPCs that bypass do.
const (
	dialTimeout = 10 * time.Second
	idleTimeout = 90 * time.Second
)

// Client talks to one sandbox.
type Client struct {
	o    Options
	hc   *http.Client
	exec execConns
}

// New returns a client.
func New(o Options) *Client {
	if o.InterpreterURL == "" {
		o.InterpreterURL = o.EnvdURL
	}
	o.EnvdURL = strings.TrimRight(o.EnvdURL, "/")
	o.InterpreterURL = strings.TrimRight(o.InterpreterURL, "/")
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = 64 << 20
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	hc := o.HTTPClient
	if hc == nil {
		d := net.Dialer{Timeout: dialTimeout}
		hc = &http.Client{Transport: &http.Transport{DialContext: d.DialContext, TLSHandshakeTimeout: dialTimeout,
			ResponseHeaderTimeout: DefaultHeaderTimeout, MaxIdleConnsPerHost: 16, IdleConnTimeout: idleTimeout}}
	}
	return &Client{o: o, hc: hc}
}

// UnixHTTPClient returns an HTTP client whose every connection goes to the unix
// socket at path; use it with EnvdURL "http://sandbox".
func UnixHTTPClient(path string) *http.Client {
	dial := UnixDial(path)
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx)
		},
		ResponseHeaderTimeout: DefaultHeaderTimeout,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       idleTimeout,
		// Over a local socket compression is only CPU: without this the
		// transport asks for gzip and the agent compresses every download
		// (a 2 GiB read ran at 392 MB/s, gzip on both ends). A request that
		// names an Accept-Encoding itself (an SDK's, through serve) still
		// gets what it asked for.
		DisableCompression: true,
	}}
}

// UnixDial returns a dialer of the unix socket at path (for Options.Dial).
func UnixDial(path string) func(context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }
}

// HTTPClient is the client used for every request (for Connect RPC clients).
func (c *Client) HTTPClient() *http.Client { return c.hc }

// AccessToken is the envd access token the client sends ("" = none).
func (c *Client) AccessToken() string { return c.o.AccessToken }

// EnvdURL is the envd base URL.
func (c *Client) EnvdURL() string { return c.o.EnvdURL }

// EnvdHeaders returns the headers every envd request carries (token, routing, user).
func (c *Client) EnvdHeaders() http.Header {
	h := http.Header{}
	for k, v := range c.o.EnvdHeaders {
		h[k] = v
	}
	if c.o.AccessToken != "" {
		h.Set("X-Access-Token", c.o.AccessToken)
	}
	if c.o.User != "" {
		h.Set("Authorization", "Basic "+basicUser(c.o.User))
	}
	return h
}

func basicUser(u string) string {
	return base64.StdEncoding.EncodeToString([]byte(u + ":"))
}
