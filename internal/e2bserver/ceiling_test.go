//go:build linux

package e2bserver

import (
	"strings"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// The operator's network ceiling (issue #41 item 9): E2B's Python SDK sends
// allow_internet_access true on every create, so --default-network none
// alone never holds for it. --max-network does: above it is a 403 naming
// the flag, never a sandbox with less (or more) than it asked for.

func TestMaxNetworkAtStart(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string // "" = accepted
	}{
		{Options{DefaultNetwork: "all", MaxNetwork: "none"}, "--max-network"},
		{Options{DefaultNetwork: "all", MaxNetwork: "allowlist"}, "--max-network"},
		{Options{MaxNetwork: "some"}, "--max-network"},
		{Options{DefaultNetwork: "none", MaxNetwork: "none"}, ""},
		{Options{DefaultNetwork: "all", MaxNetwork: "all"}, ""},
		{Options{MaxNetwork: "allowlist"}, ""},
	} {
		c.o.APIKeys = []string{testKey}
		setRuntimeDir(&c.o.Config, t.TempDir())
		_, err := New(c.o)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("default %q, max %q: %v", c.o.DefaultNetwork, c.o.MaxNetwork, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("default %q, max %q: %v, want an error naming %s", c.o.DefaultNetwork, c.o.MaxNetwork, err, c.want)
		}
	}
}

// Above the ceiling: refused before anything is created, with the flag's
// name; the Python SDK's own body among them.
func TestMaxNetworkRefused(t *testing.T) {
	bodies := map[string][]string{
		"none": {
			`{"templateID":"base","allow_internet_access":true}`, // the Python SDK's create
			`{"templateID":"base","allow_internet_access":true,"network":{"allowOut":["203.0.113.7"]}}`,
			`{"templateID":"base","network":{"denyOut":["0.0.0.0/0"]}}`,
			`{"templateID":"base","network":{"denyOut":["0.0.0.0/0"],"allowOut":["203.0.113.7"]}}`,
			`{"templateID":"base","network":{"denyOut":["203.0.113.0/24"]}}`,
		},
		"allowlist": {
			`{"templateID":"base","allow_internet_access":true}`,
			`{"templateID":"base","network":{"denyOut":["203.0.113.0/24"]}}`,
			`{"templateID":"base","network":{"allowOut":["203.0.113.7"]}}`, // nothing denied: all
		},
	}
	for max, list := range bodies {
		s, base := testServer(t, Options{MaxNetwork: max})
		for _, body := range list {
			wantError(t, "POST", base+"/sandboxes", testKey, body, 403, "--max-network "+max)
		}
		if n := len(s.Created()); n != 0 {
			t.Errorf("--max-network %s: %d sandboxes were created by refused requests", max, n)
		}
	}
}

// At or below the ceiling: created, with what was asked; a network update
// above it is refused and changes nothing.
func TestMaxNetworkAllowed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	s, base := testServer(t, Options{MaxNetwork: "none"})
	for _, body := range []string{`{"templateID":"base"}`, `{"templateID":"base","allow_internet_access":false}`} {
		sb := createSB(t, base, testKey, body)
		var d sandboxDetail
		if resp := call(t, "GET", base+"/sandboxes/"+sb.SandboxID, testKey, "", nil, &d); resp.StatusCode != 200 || d.AllowInternetAccess {
			t.Errorf("%s under --max-network none: %d, allowInternetAccess %v", body, resp.StatusCode, d.AllowInternetAccess)
		}
		if i, err := s.lookup(sb.SandboxID, "").inst.Info(t.Context()); err != nil || i.Network != sandboxes.NetworkNone {
			t.Errorf("%s under --max-network none: network %q (%v), want none", body, i.Network, err)
		}
	}

	_, base = testServer(t, Options{MaxNetwork: "allowlist"})
	sb := createSB(t, base, testKey, `{"templateID":"base","network":{"denyOut":["0.0.0.0/0"],"allowOut":["203.0.113.7"]}}`)
	for _, body := range []string{`{}`, `{"allow_internet_access":true}`, `{"denyOut":["203.0.113.0/24"]}`} {
		if st, e := putNetwork(t, base, testKey, sb.SandboxID, body); st != 403 || !strings.Contains(e.Message, "--max-network allowlist") {
			t.Errorf("network update %s under --max-network allowlist: %d %q, want 403 naming --max-network", body, st, e.Message)
		}
	}
	var d sandboxDetail
	call(t, "GET", base+"/sandboxes/"+sb.SandboxID, testKey, "", nil, &d)
	if d.AllowInternetAccess || d.Network == nil || strings.Join(d.Network.AllowOut, ",") != "203.0.113.7" {
		t.Errorf("after refused updates: allowInternetAccess %v, network %+v; want the create's", d.AllowInternetAccess, d.Network)
	}
	if st, e := putNetwork(t, base, testKey, sb.SandboxID, `{"denyOut":["0.0.0.0/0"],"allowOut":["203.0.113.8"]}`); st != 204 {
		t.Errorf("network update within the ceiling: %d %q", st, e.Message)
	}
}

func TestCheckNetworkCeiling(t *testing.T) {
	for _, c := range []struct {
		n      sandboxes.Network
		max    string
		refuse bool
	}{
		{sandboxes.Network{}, "none", false},
		{sandboxes.Network{Policy: "none"}, "none", false},
		{sandboxes.Network{Policy: "allowlist", AllowedHosts: []string{"example.com"}}, "none", true},
		{sandboxes.Network{Policy: "allowlist", AllowedHosts: []string{"example.com"}}, "allowlist", false},
		{sandboxes.Network{Policy: "all"}, "allowlist", true},
		{sandboxes.Network{Policy: "all", DeniedHosts: []string{"203.0.113.0/24"}}, "allowlist", true},
		{sandboxes.Network{Policy: "all", DeniedHosts: []string{"0.0.0.0/0"}, AllowedHosts: []string{"example.com"}}, "allowlist", false},
		{sandboxes.Network{Policy: "all", DeniedHosts: []string{"::/0"}}, "none", true},
		{sandboxes.Network{Policy: "all"}, "all", false},
		{sandboxes.Network{Policy: "all"}, "", false},
	} {
		err := CheckNetworkCeiling(c.n, c.max, "--max-network")
		if (err != nil) != c.refuse || (err != nil && !strings.Contains(err.Error(), "--max-network "+c.max)) {
			t.Errorf("%+v under %q: %v, refuse %v", c.n, c.max, err, c.refuse)
		}
	}
}
