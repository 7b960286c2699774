package jupyter

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Options are the jupyter variant's own settings (jupyter.Options in the
// public package). Empty values are read from the environment: URL from
// $JUPYTER_SERVER_URL, Token from $JUPYTER_TOKEN (a URL that carries
// ?token=… gives it too).
type Options struct {
	// URL is the Jupyter Server's base URL, e.g. http://127.0.0.1:8888 (or
	// with its base_url, http://host/user/me).
	URL string
	// Token is the server's token, sent as "Authorization: token …".
	Token string
	// Dir is the sandbox's working directory, relative to the server's root
	// directory ("" = the root); it must exist. Relative file paths and the
	// kernels' working directory start there.
	Dir string
	// Header is added to every request (a deployment whose credentials are
	// a cookie and an X-XSRFToken rather than a token).
	Header http.Header
	// HTTPClient carries the REST calls and the WebSocket handshakes; nil =
	// a client with bounded dial and header waits.
	HTTPClient *http.Client
}

// conf is a resolved Options.
type conf struct {
	base   *url.URL // no trailing slash, no query
	token  string
	dir    string // cleaned, relative to the server's root, "" = root
	header http.Header
	hc     *http.Client
}

func optionsOf(spec driver.Spec) (Options, error) { return driver.OptionsOf[Options](spec) }

// resolve validates spec's options and fills the defaults from the
// environment.
func resolve(spec driver.Spec) (*conf, error) {
	o, err := optionsOf(spec)
	if err != nil {
		return nil, err
	}
	raw := strings.TrimSpace(o.URL)
	if raw == "" {
		raw = strings.TrimSpace(os.Getenv("JUPYTER_SERVER_URL"))
	}
	if raw == "" {
		return nil, fmt.Errorf("%w: the jupyter variant needs a Jupyter Server: set jupyter.Options.URL or $JUPYTER_SERVER_URL (e.g. http://127.0.0.1:8888) and its token", sberr.ErrInvalidConfig)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: Jupyter Server URL %q: give http(s)://host:port[/base_url]", sberr.ErrInvalidConfig, raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: Jupyter Server URL %q: credentials go in the token, not the URL", sberr.ErrInvalidConfig, u.Redacted())
	}
	token := o.Token
	if t := u.Query().Get("token"); t != "" {
		if token != "" && token != t {
			return nil, fmt.Errorf("%w: the Jupyter Server URL carries a token that differs from Options.Token; give one", sberr.ErrInvalidConfig)
		}
		token = t
	}
	if token == "" {
		token = os.Getenv("JUPYTER_TOKEN")
	}
	if strings.ContainsAny(token, "\r\n") {
		return nil, fmt.Errorf("%w: the Jupyter token holds a line break", sberr.ErrInvalidConfig)
	}
	u.RawQuery, u.Fragment = "", ""
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	dir, err := cleanRel(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: jupyter.Options.Dir: %w", sberr.ErrInvalidConfig, err)
	}
	if spec.WorkingDir != "" {
		// WorkingDir is absolute inside the sandbox: here, the server's root.
		if dir, err = cleanRel(spec.WorkingDir); err != nil {
			return nil, fmt.Errorf("%w: WorkingDir: %w", sberr.ErrInvalidConfig, err)
		}
		if o.Dir != "" {
			return nil, fmt.Errorf("%w: WorkingDir and jupyter.Options.Dir both name the working directory; give one", sberr.ErrInvalidConfig)
		}
	}
	hc := o.HTTPClient
	if hc == nil {
		d := net.Dialer{Timeout: 30 * time.Second}
		hc = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           d.DialContext,
			ResponseHeaderTimeout: 2 * time.Minute,
			TLSHandshakeTimeout:   15 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   8,
		}}
	}
	return &conf{base: u, token: token, dir: dir, header: o.Header.Clone(), hc: hc}, nil
}

// cleanRel turns a path into one relative to the server's root: "/a/b",
// "a/b" and "a//b/" are "a/b"; ".." may not climb above the root.
func cleanRel(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q holds a NUL byte", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", fmt.Errorf("path %q: '..' is refused (paths are inside the server's root directory)", p)
		}
	}
	c := strings.Trim(path.Clean("/"+p), "/")
	return c, nil
}
