package e2bserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// fuzzServer is a Server whose runtime directory is a regular file, so a
// request that gets as far as creating a sandbox fails there (500,
// "creating the sandbox") instead of starting one: that answer marks a
// body the server's own checks accepted. Template builds are on, over a
// store in a temporary directory (nothing is ever built: the targets call
// no trigger).
func fuzzServer(f *testing.F, mod func(*Options)) (*Server, string) {
	f.Helper()
	dir := f.TempDir()
	file := filepath.Join(dir, "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		f.Fatal(err)
	}
	o := Options{APIKeys: []string{testKey}, TemplateBuilds: true,
		Config: sandboxes.Config{Options: local.Options{RuntimeDir: file}, EnvironmentDir: filepath.Join(dir, "env")}}
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		f.Fatal(err)
	}
	return s, dir
}

// checkAPIError: every refusal is E2B's error body, its code the status,
// with a message that says why.
func checkAPIError(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != rec.Code || strings.TrimSpace(e.Message) == "" {
		t.Fatalf("status %d with body %q: not an error body with its code and a message (%v)", rec.Code, rec.Body.String(), err)
	}
}

// FuzzCreateBody: POST /sandboxes with any body (E2B's NewSandbox).
// Properties: never a panic, never a sandbox (the runtime directory is a
// file), every refusal a 4xx with E2B's error body, and every body the
// server's checks let through (it reached the sandbox's creation) within
// the bounds they enforce: a timeout of 1 s to MaxTimeout, secure not
// false, no volume mounts, iam or MCP, no reserved metadata key, at most
// 1000 allowOut and denyOut entries, denyOut only IPs and CIDRs.
func FuzzCreateBody(f *testing.F) {
	for _, s := range []string{
		`{"templateID":"base","timeout":300,"metadata":{"a":"b"},"envVars":{"K":"v"}}`,
		`{"templateID":"code-interpreter-v1","timeout":86400,"allow_internet_access":true,"secure":true}`,
		`{"templateID":"base","allow_internet_access":false,"autoPause":true,"autoResume":{"enabled":true}}`,
		`{"templateID":"base","network":{"allowOut":["example.com","*.example.org","1.1.1.1"],"denyOut":["0.0.0.0/0"],"allowPublicTraffic":false,"maskRequestHost":"${PORT}-x.example.com"}}`,
		`{"templateID":"base","network":{"denyOut":["example.com"]}}`,
		`{"templateID":"base","network":{"allowOut":["10.0.0.0/8"],"denyOut":["0.0.0.0/0"]}}`,
		`{"templateID":"base","network":{"rules":{"example.com":[{"transform":{}}]}}}`,
		`{"templateID":"base","timeout":-1}`, `{"templateID":"base","timeout":9223372036854775807}`,
		`{"templateID":"base","secure":false}`, `{"templateID":"base","volumeMounts":[{}]}`, `{"templateID":"base","mcp":{"x":1}}`,
		`{"templateID":"base","metadata":{"e2bserver/team":"other"}}`, `{"templateID":"base","tools":["nope"]}`,
		`{"templateID":"nope"}`, `{"templateID":"base","iam":{}}`, `{`, `[]`, `null`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	s, _ := fuzzServer(f, nil)
	maxSecs := int64(s.maxTimeout.Seconds())
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/sandboxes", bytes.NewReader(body))
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusInternalServerError:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		checkAPIError(t, rec)
		if rec.Code != http.StatusInternalServerError {
			return
		}
		if !strings.Contains(rec.Body.String(), "creating the sandbox") {
			t.Fatalf("500 before the creation: %s", rec.Body.String())
		}
		// Accepted by the server's checks: within their bounds.
		var ns newSandbox
		if err := json.Unmarshal(body, &ns); err != nil {
			t.Fatalf("accepted a body that is not JSON: %q", body)
		}
		if ns.Timeout != nil && (*ns.Timeout < 1 || *ns.Timeout > maxSecs) {
			t.Fatalf("accepted timeout %d (1 to %d)", *ns.Timeout, maxSecs)
		}
		if ns.Secure != nil && !*ns.Secure || len(ns.VolumeMounts) > 0 || present(ns.IAM) || len(ns.MCP) > 0 && string(ns.MCP) != "null" {
			t.Fatalf("accepted an unsupported option: %q", body)
		}
		for k := range ns.Metadata {
			if strings.HasPrefix(k, tagPrefix) {
				t.Fatalf("accepted reserved metadata key %q", k)
			}
		}
		if n := ns.Network; n != nil {
			if len(n.AllowOut) > maxNetworkEntries || len(n.DenyOut) > maxNetworkEntries {
				t.Fatalf("accepted %d/%d network entries", len(n.AllowOut), len(n.DenyOut))
			}
			for _, d := range n.DenyOut {
				if _, err := parseIPOrCIDR(strings.TrimSpace(d)); err != nil {
					t.Fatalf("accepted denyOut %q", d)
				}
			}
			if refuseUnsupported(n.Rules, n.EgressProxy, n.HTTPSPorts) != "" || n.MaskRequestHost != nil && checkMask(*n.MaskRequestHost) != nil {
				t.Fatalf("accepted unsupported network options: %q", body)
			}
		}
	})
}

// FuzzSandboxTarget: the data plane's routing of a request to a sandbox,
// from E2B's host form PORT-SANDBOXID.domain or the SDKs' E2b-Sandbox-Id
// and E2b-Sandbox-Port headers. Properties: a routed request names a port
// of 1 to 65535 (or -1, which the proxy answers with a 400) and an id of
// the sandbox id form only (no '.', '/', '-' or upper case: nothing that
// could be a path or another host); the host form round-trips (the same
// id and port, written back into a host name, route the same way); and
// any Host without that form is not routed.
func FuzzSandboxTarget(f *testing.F) {
	f.Add("49983-abc123.localhost", "", "")
	f.Add("8080-i0kkj3hbpz5l4sjr7h5vb.e2b.app:443", "", "")
	f.Add("x", "abc", "49999")
	f.Add("x", "abc", "0")
	f.Add("0049983-abc.x", "", "")
	f.Add("+80-abc.x", "", "")
	f.Add("80-ABC.x", "", "")
	f.Add("80-a.b-c.x", "", "")
	f.Add("65536-abc.x", "", "")
	f.Add("-abc.x", "", "")
	f.Fuzz(func(t *testing.T, host, idHeader, portHeader string) {
		r := &http.Request{Host: host, Header: http.Header{}}
		if idHeader != "" {
			r.Header.Set("E2b-Sandbox-Id", idHeader)
			r.Header.Set("E2b-Sandbox-Port", portHeader)
		}
		id, port, ok := sandboxTarget(r)
		if r.Header.Get("E2b-Sandbox-Id") != "" {
			// The header form: the id as given (looked up as a map key,
			// never used as a path), the port checked.
			if !ok || id != r.Header.Get("E2b-Sandbox-Id") || port != -1 && (port < 1 || port > 65535) {
				t.Fatalf("headers %q %q: %q %d %v", idHeader, portHeader, id, port, ok)
			}
			return
		}
		if !ok {
			if id != "" || port != 0 {
				t.Fatalf("host %q not routed but gave %q %d", host, id, port)
			}
			return
		}
		if port < 1 || port > 65535 || !sandboxIDPattern.MatchString(id) {
			t.Fatalf("host %q routed to %q port %d", host, id, port)
		}
		// Round trip: written back into a host name, the same target.
		_, domain, _ := strings.Cut(host, ".")
		back := &http.Request{Host: fmt.Sprintf("%d-%s.%s", port, id, domain), Header: http.Header{}}
		if id2, port2, ok2 := sandboxTarget(back); !ok2 || id2 != id || port2 != port {
			t.Fatalf("host %q → %q %d → host %q → %q %d %v", host, id, port, back.Host, id2, port2, ok2)
		}
	})
}
