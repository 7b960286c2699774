package e2b

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

func clearEnv(t *testing.T) {
	for _, k := range []string{"E2B_API_KEY", "E2B_DOMAIN", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DEBUG", "E2B_VALIDATE_API_KEY"} {
		t.Setenv(k, "")
	}
}

// URL selection as in the SDKs (e2b-protocol.md §2.1-2.3).
func TestURLs(t *testing.T) {
	clearEnv(t)
	const id = "i1a2b3c4d5e6f7g8h9j0k"
	sb := sandboxJSON{SandboxID: id, EnvdVersion: "0.6.13", EnvdAccessToken: "tok"}
	for _, tc := range []struct {
		name                    string
		spec                    Options
		env                     map[string]string
		api, envd, interp, host string
	}{
		{name: "default", api: "https://api.e2b.app", envd: "https://sandbox.e2b.app", interp: "https://49999-" + id + ".e2b.app", host: "8000-" + id + ".e2b.app"},
		{name: "e2b.dev from env", env: map[string]string{"E2B_DOMAIN": "e2b.dev"}, api: "https://api.e2b.dev", envd: "https://sandbox.e2b.dev", interp: "https://49999-" + id + ".e2b.dev", host: "8000-" + id + ".e2b.dev"},
		{name: "custom domain", spec: Options{Domain: "sbx.example.com"}, api: "https://api.sbx.example.com", envd: "https://49983-" + id + ".sbx.example.com", interp: "https://49999-" + id + ".sbx.example.com", host: "8000-" + id + ".sbx.example.com"},
		{name: "debug", env: map[string]string{"E2B_DEBUG": "true"}, api: "http://localhost:3000", envd: "http://localhost:49983", interp: "http://localhost:49999", host: "localhost:8000"},
		{name: "api url from env", env: map[string]string{"E2B_API_URL": "http://127.0.0.1:3000/"}, api: "http://127.0.0.1:3000", envd: "https://sandbox.e2b.app", interp: "https://49999-" + id + ".e2b.app", host: "8000-" + id + ".e2b.app"},
		{name: "sandbox url", spec: Options{SandboxURL: "http://127.0.0.1:4000"}, env: map[string]string{"E2B_SANDBOX_URL": "http://ignored:1"}, api: "https://api.e2b.app", envd: "http://127.0.0.1:4000", interp: "http://127.0.0.1:4000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := resolve(driver.Spec{Options: tc.spec})
			if err != nil {
				t.Fatal(err)
			}
			i := newInstance(c, sb)
			defer i.Release()
			if c.apiURL != tc.api || i.cl.EnvdURL() != tc.envd || c.directURL(id, i.domain, InterpreterPort) != tc.interp {
				t.Errorf("api %s envd %s interp %s", c.apiURL, i.cl.EnvdURL(), c.directURL(id, i.domain, InterpreterPort))
			}
			if h := i.cl.EnvdHeaders(); h.Get("E2b-Sandbox-Id") != id || h.Get("E2b-Sandbox-Port") != "49983" || h.Get("X-Access-Token") != "tok" {
				t.Errorf("envd headers %v", h)
			}
			if tc.host != "" {
				if h, err := i.Host(context.Background(), 8000); err != nil || h != tc.host {
					t.Errorf("host = %q, %v; want %q", h, err, tc.host)
				}
			}
		})
	}
	// The sandbox's own domain, when the API names one, wins.
	c, _ := resolve(driver.Spec{Options: Options{}})
	d := "eu.e2b.example"
	i := newInstance(c, sandboxJSON{SandboxID: id, Domain: &d})
	if i.cl.EnvdURL() != "https://49983-"+id+".eu.e2b.example" {
		t.Errorf("envd with the sandbox's domain: %s", i.cl.EnvdURL())
	}
	// envd before 0.4.0 gets the SDKs' default user.
	i = newInstance(c, sandboxJSON{SandboxID: id, EnvdVersion: "0.3.9"})
	if i.cl.EnvdHeaders().Get("Authorization") != "Basic dXNlcjo=" {
		t.Errorf("old envd: %v", i.cl.EnvdHeaders())
	}
}

func TestConfigErrors(t *testing.T) {
	clearEnv(t)
	if _, err := resolve(driver.Spec{Options: Options{APIURL: "ftp://x"}}); !errors.Is(err, sberr.ErrInvalidConfig) {
		t.Errorf("bad api url: %v", err)
	}
	if _, err := resolve(driver.Spec{Options: Options{Domain: "https://e2b.app"}}); !errors.Is(err, sberr.ErrInvalidConfig) {
		t.Errorf("url as domain: %v", err)
	}
	c, _ := resolve(driver.Spec{Options: Options{APIKey: "e2b_XYZ"}})
	if err := c.checkKey(); !errors.Is(err, sberr.ErrInvalidConfig) {
		t.Errorf("upper-case key: %v", err)
	}
	t.Setenv("E2B_VALIDATE_API_KEY", "false")
	c, _ = resolve(driver.Spec{Options: Options{APIKey: "e2b_XYZ"}})
	if err := c.checkKey(); err != nil {
		t.Errorf("validation off: %v", err)
	}
}

func TestHelpers(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 1, time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, time.Hour: 3600} {
		if got := seconds(d); got != want {
			t.Errorf("seconds(%s) = %d, want %d", d, got, want)
		}
	}
	for _, tc := range []struct {
		v           string
		maj, mi, pa int
		want        bool
	}{{"0.0.9", 0, 1, 0, true}, {"0.1.0", 0, 1, 0, false}, {"0.3.99", 0, 4, 0, true}, {"0.4.0", 0, 4, 0, false},
		{"0.6.13", 0, 4, 0, false}, {"1.0.0-rc1", 0, 4, 0, false}, {"v0.0.1", 0, 1, 0, true}, {"junk", 0, 1, 0, false}} {
		if got := versionLess(tc.v, tc.maj, tc.mi, tc.pa); got != tc.want {
			t.Errorf("versionLess(%s, %d.%d.%d) = %v", tc.v, tc.maj, tc.mi, tc.pa, got)
		}
	}
	if q := metadataQuery(map[string]string{"b": "x y", "a": "1&2"}); q != "a=1%25262&b=x%2520y" {
		t.Errorf("metadataQuery = %q", q)
	}
}

// An allowOut/denyOut entry is the same rule however E2B writes it back.
func TestSameDestination(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"8.8.8.8", "8.8.8.8/32", true},
		{"10.1.2.3/8", "10.0.0.0/8", true},
		{"PyPI.org", "pypi.org", true},
		{"0.0.0.0/0", "0.0.0.0/1", false},
		{"pypi.org", "*.pypi.org", false},
		{"::/0", "0.0.0.0/0", false},
	} {
		if got := sameDestination(c.a, c.b); got != c.want {
			t.Errorf("sameDestination(%q, %q) = %v", c.a, c.b, got)
		}
	}
}
