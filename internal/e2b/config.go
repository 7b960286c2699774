// Package e2b is the e2b variant: a client of E2B's cloud or of any
// E2B-compatible host (code-sandboxes serve). The control plane is E2B's REST
// API; the data plane (envd on port 49983, the code interpreter on 49999) is
// spoken by the shared internal/client, exactly as by the other variants.
//
// Settings resolve as in E2B's SDKs (shared/reference/e2b-protocol.md §2):
// an explicit value, else the SDK's environment variable, else the default.
package e2b

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Ports inside an E2B sandbox.
const (
	EnvdPort        = 49983
	InterpreterPort = 49999
)

// DefaultTemplate is the template of E2B's code-interpreter SDKs.
const DefaultTemplate = "code-interpreter-v1"

// EnvironmentName is the name ListEnvironments gives the default template.
const EnvironmentName = "e2b-code-interpreter"

const defaultDomain = "e2b.app"

// debugSandboxID is the id E2B's SDKs use in debug mode (no API call).
const debugSandboxID = "debug_sandbox_id"

// apiKeyPattern is the client-side check of E2B's SDKs (JS e2b ≥ 2.27).
var apiKeyPattern = regexp.MustCompile(`^e2b_[0-9a-f]+$`)

// stableHostDomains are the domains whose envd is reached through the shared
// host sandbox.<domain> with routing headers (JS e2b ≥ 2.25).
var stableHostDomains = map[string]bool{"e2b.app": true, "e2b.dev": true, "e2b.pro": true, "e2b-staging.dev": true}

// conf is a resolved E2BSpec.
type conf struct {
	apiKey, keySource string
	domain            string
	apiURL            string
	sandboxURL        string
	debug             bool
	listAll           bool
	validateKey       bool
}

func resolve(spec driver.Spec) (*conf, error) {
	s, err := optionsOf(spec)
	if err != nil {
		return nil, err
	}
	c := &conf{apiKey: s.APIKey, keySource: "e2b.Options.APIKey", domain: s.Domain, apiURL: s.APIURL,
		sandboxURL: s.SandboxURL, debug: s.Debug, listAll: s.ListAll, validateKey: true}
	if c.apiKey == "" {
		c.apiKey, c.keySource = os.Getenv("E2B_API_KEY"), "$E2B_API_KEY"
	}
	if c.domain == "" {
		c.domain = os.Getenv("E2B_DOMAIN")
	}
	if c.domain == "" {
		c.domain = defaultDomain
	}
	if !c.debug {
		c.debug = strings.EqualFold(strings.TrimSpace(os.Getenv("E2B_DEBUG")), "true")
	}
	if c.apiURL == "" {
		c.apiURL = os.Getenv("E2B_API_URL")
	}
	if c.apiURL == "" {
		if c.debug {
			c.apiURL = "http://localhost:3000"
		} else {
			c.apiURL = "https://api." + c.domain
		}
	}
	if c.sandboxURL == "" {
		c.sandboxURL = os.Getenv("E2B_SANDBOX_URL")
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv("E2B_VALIDATE_API_KEY")), "false") {
		c.validateKey = false
	}
	if strings.ContainsAny(c.domain, "/:@ \t\r\n") {
		return nil, fmt.Errorf("%w: E2B domain %q: give a bare domain such as e2b.app (use APIURL / SandboxURL for URLs)", sberr.ErrInvalidConfig, c.domain)
	}
	if c.apiURL, err = checkURL("E2B API URL", c.apiURL); err != nil {
		return nil, err
	}
	if c.sandboxURL != "" {
		if c.sandboxURL, err = checkURL("E2B sandbox URL", c.sandboxURL); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func checkURL(what, s string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%w: %s %q: give an http:// or https:// URL", sberr.ErrInvalidConfig, what, s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// checkKey is the SDKs' client-side check, before any request.
func (c *conf) checkKey() error {
	if c.apiKey == "" {
		return fmt.Errorf("%w: %w: no E2B API key: set e2b.Options.APIKey or the E2B_API_KEY environment variable (from https://e2b.dev/dashboard, or the key of your code-sandboxes serve)",
			sberr.ErrInvalidConfig, sberr.ErrUnauthorized)
	}
	if c.validateKey && !apiKeyPattern.MatchString(c.apiKey) {
		return fmt.Errorf("%w: the E2B API key from %s does not look like e2b_<hex> (as E2B's SDKs check; set E2B_VALIDATE_API_KEY=false to skip the check)",
			sberr.ErrInvalidConfig, c.keySource)
	}
	return nil
}

// envdURL is getSandboxUrl of the SDKs: sandboxUrl, debug localhost, the
// stable host for E2B's own domains, else the per-sandbox host.
func (c *conf) envdURL(id, domain string) string {
	switch {
	case c.sandboxURL != "":
		return c.sandboxURL
	case c.debug:
		return fmt.Sprintf("http://localhost:%d", EnvdPort)
	case stableHostDomains[domain]:
		return "https://sandbox." + domain
	}
	return fmt.Sprintf("https://%d-%s.%s", EnvdPort, id, domain)
}

// directURL is getSandboxDirectUrl: like envdURL without the stable host
// (the code interpreter, port 49999).
func (c *conf) directURL(id, domain string, port int) string {
	switch {
	case c.sandboxURL != "":
		return c.sandboxURL
	case c.debug:
		return fmt.Sprintf("http://localhost:%d", port)
	}
	return fmt.Sprintf("https://%d-%s.%s", port, id, domain)
}

// sandboxIDPattern bounds what we put into host names and paths.
var sandboxIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func checkID(id string) error {
	if !sandboxIDPattern.MatchString(id) {
		return fmt.Errorf("sandbox %q: %w: an E2B sandbox id is letters, digits, '-' and '_'", id, sberr.ErrInvalidInput)
	}
	return nil
}
