package e2b

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// instance is one E2B sandbox.
type instance struct {
	c       *conf
	id      string
	domain  string
	traffic string // E2B-Traffic-Access-Token, when the sandbox has one
	cl      *client.Client
	tr      *dataTransport

	mu      sync.Mutex
	proxies map[int]*http.Server
	left    time.Duration // lifetime left at Pause, for Resume
}

func newInstance(c *conf, sb sandboxJSON) *instance {
	domain := c.domain
	if sb.Domain != nil && *sb.Domain != "" {
		domain = *sb.Domain
	}
	i := &instance{c: c, id: sb.SandboxID, domain: domain, proxies: map[int]*http.Server{}}
	if sb.TrafficAccessToken != nil {
		i.traffic = *sb.TrafficAccessToken
	}
	envdHdr := http.Header{"E2b-Sandbox-Id": {sb.SandboxID}, "E2b-Sandbox-Port": {strconv.Itoa(EnvdPort)}}
	interpHdr := http.Header{"E2b-Sandbox-Id": {sb.SandboxID}, "E2b-Sandbox-Port": {strconv.Itoa(InterpreterPort)}}
	if i.traffic != "" {
		interpHdr.Set("E2b-Traffic-Access-Token", i.traffic)
	}
	envdURL := c.envdURL(sb.SandboxID, domain)
	probeHdr := envdHdr.Clone()
	if sb.EnvdAccessToken != "" {
		probeHdr.Set("X-Access-Token", sb.EnvdAccessToken)
	}
	i.tr = &dataTransport{
		base: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 15 * time.Second,
			// No response-header timeout: a command's Start answers only
			// once it runs, and executions stream for as long as they last.
		},
		id: sb.SandboxID, envdURL: envdURL, envdHdr: probeHdr,
	}
	o := client.Options{
		EnvdURL: envdURL, InterpreterURL: c.directURL(sb.SandboxID, domain, InterpreterPort),
		HTTPClient: &http.Client{Transport: i.tr}, AccessToken: sb.EnvdAccessToken,
		EnvdHeaders: envdHdr, InterpreterHeaders: interpHdr,
	}
	if versionLess(sb.EnvdVersion, 0, 4, 0) {
		// envd before 0.4.0 has no default user; the SDKs send "user".
		o.User = "user"
	}
	i.cl = client.New(o)
	return i
}

// versionLess reports whether the semver v is below major.minor.patch; an
// unparsable version counts as new (E2B always sends one).
func versionLess(v string, major, minor, patch int) bool {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	var n [3]int
	for k, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		n[k] = x
	}
	want := [3]int{major, minor, patch}
	for k := range n {
		if n[k] != want[k] {
			return n[k] < want[k]
		}
	}
	return false
}

func (i *instance) ID() string             { return i.id }
func (i *instance) Client() *client.Client { return i.cl }

func (i *instance) api() api { return api{c: i.c} }

// Info is GET /sandboxes/{id}.
func (i *instance) Info(ctx context.Context) (driver.Info, error) {
	return getInfo(ctx, i.c, i.id)
}

func getInfo(ctx context.Context, c *conf, id string) (driver.Info, error) {
	var d sandboxDetail
	if _, err := (api{c: c}).call(ctx, "sandbox info", http.MethodGet, "/sandboxes/"+url.PathEscape(id), id, nil, &d); err != nil {
		return driver.Info{}, err
	}
	return infoOf(d), nil
}

// infoOf maps E2B's SandboxDetail / ListedSandbox; the name and tags live
// in the metadata (see Create).
func infoOf(d sandboxDetail) driver.Info {
	info := driver.Info{ID: d.SandboxID, Variant: "e2b", Name: d.Metadata[metaName], Status: d.State,
		CreatedAt: d.StartedAt, EndAt: d.EndAt, Memory: d.MemoryMB << 20, CPUs: d.CPUCount}
	if info.Status == "" {
		info.Status = "running"
	}
	for k, v := range d.Metadata {
		if k == metaName || k == metaCreatedBy {
			continue
		}
		if info.Tags == nil {
			info.Tags = map[string]string{}
		}
		info.Tags[k] = v
	}
	if d.Network != nil {
		// The rules the host reports, as the sandbox has them: an
		// allowlist is allowOut plus a deny-all (0.0.0.0/0) on E2B.
		info.AllowedHosts, info.DeniedHosts = d.Network.AllowOut, d.Network.DenyOut
	}
	switch {
	case d.Network != nil && slices.Contains(d.Network.DenyOut, "0.0.0.0/0") && len(d.Network.AllowOut) > 0:
		info.Network = "allowlist"
	case d.Network != nil && slices.Contains(d.Network.DenyOut, "0.0.0.0/0"):
		info.Network = "none"
	case d.AllowInternetAccess != nil && !*d.AllowInternetAccess:
		info.Network = "none"
	case d.AllowInternetAccess != nil:
		info.Network = "all"
	}
	return info
}

// networkUpdate is E2B's SandboxNetworkUpdateConfig: it replaces the
// sandbox's egress rules, omitted fields cleared.
type networkUpdate struct {
	AllowInternetAccess *bool    `json:"allow_internet_access,omitempty"`
	AllowOut            []string `json:"allowOut,omitempty"`
	DenyOut             []string `json:"denyOut,omitempty"`
}

// UpdateNetwork is PUT /sandboxes/{id}/network (driver.NetworkUpdater).
func (i *instance) UpdateNetwork(ctx context.Context, np driver.NetworkPolicy) error {
	aia, nc, err := networkOf(np)
	if err != nil {
		return err
	}
	var body networkUpdate
	if !aia {
		body.AllowInternetAccess = &aia
	}
	if nc != nil {
		body.AllowOut, body.DenyOut = nc.AllowOut, nc.DenyOut
	}
	if i.c.debug {
		return nil // as the SDKs: debug mode has no control plane
	}
	_, err = i.api().call(ctx, "update network", http.MethodPut, "/sandboxes/"+url.PathEscape(i.id)+"/network", i.id, body, nil)
	return err
}

// SetTimeout is POST /sandboxes/{id}/timeout: the sandbox ends d from now.
func (i *instance) SetTimeout(ctx context.Context, d time.Duration) error {
	if i.c.debug {
		return nil // as the SDKs: debug mode has no control plane
	}
	_, err := i.api().call(ctx, "set timeout", http.MethodPost, "/sandboxes/"+url.PathEscape(i.id)+"/timeout", i.id,
		map[string]int64{"timeout": seconds(d)}, nil)
	return err
}

// seconds is E2B's whole seconds, rounded up, at least 1.
func seconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// Host returns where the caller reaches port inside the sandbox:
//   - with a SandboxURL (e.g. code-sandboxes serve), a loopback HTTP proxy
//     of this process that forwards to the SandboxURL with E2B's routing
//     headers for that port (HTTP and WebSocket; it lives until Release);
//   - in debug mode, localhost:<port>, as the SDKs;
//   - else E2B's public host <port>-<id>.<domain>, served over HTTPS on 443.
func (i *instance) Host(ctx context.Context, port int) (string, error) {
	switch {
	case i.c.sandboxURL != "":
		return i.localProxy(port)
	case i.c.debug:
		return "localhost:" + strconv.Itoa(port), nil
	}
	return fmt.Sprintf("%d-%s.%s", port, i.id, i.domain), nil
}

func (i *instance) localProxy(port int) (string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if s, ok := i.proxies[port]; ok {
		return s.Addr, nil
	}
	target, err := url.Parse(i.c.sandboxURL)
	if err != nil {
		return "", fmt.Errorf("%w: sandbox URL: %w", sberr.ErrInvalidConfig, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("host %d: %w", port, err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set("E2b-Sandbox-Id", i.id)
			pr.Out.Header.Set("E2b-Sandbox-Port", strconv.Itoa(port))
			if i.traffic != "" {
				pr.Out.Header.Set("E2b-Traffic-Access-Token", i.traffic)
			}
		},
		Transport:     i.tr.base,
		FlushInterval: -1,
	}
	s := &http.Server{Addr: ln.Addr().String(), Handler: rp, ReadHeaderTimeout: 30 * time.Second}
	i.proxies[port] = s
	go func() { _ = s.Serve(ln) }()
	return s.Addr, nil
}

// Kill is DELETE /sandboxes/{id}.
func (i *instance) Kill(ctx context.Context) error {
	return kill(ctx, i.c, i.id)
}

func kill(ctx context.Context, c *conf, id string) error {
	if c.debug {
		return nil // as the SDKs: nothing to kill without a control plane
	}
	_, err := (api{c: c}).call(ctx, "kill sandbox", http.MethodDelete, "/sandboxes/"+url.PathEscape(id), id, nil, nil)
	return err
}

// Release closes the Host proxies and idle connections; the sandbox lives on.
func (i *instance) Release() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for p, s := range i.proxies {
		_ = s.Close()
		delete(i.proxies, p)
	}
	i.tr.CloseIdleConnections()
	return nil
}
