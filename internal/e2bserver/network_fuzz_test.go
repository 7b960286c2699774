package e2bserver

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/egress"
)

// FuzzNetworkBody: PUT /sandboxes/{id}/network's body (E2B's
// SandboxNetworkUpdateConfig) as updateNetwork decodes and maps it, on a
// server with and without --allow-private. Properties: allow_internet_access
// false is never open (no internet, everything denied); an accepted body
// is within the bounds (at most 1000 entries each, denyOut only IPs and
// CIDRs, no entry with a port, nothing private unless the operator allows
// it); and what the egress filter then refuses of an accepted body is its
// policy error (a 400 from the variant), never anything else.
func FuzzNetworkBody(f *testing.F) {
	for _, s := range []string{
		`{"allow_internet_access":false}`, `{"allow_internet_access":true}`, `{}`,
		`{"allowOut":["example.com","*.example.org","1.1.1.1","2001:db8::/32"],"denyOut":["0.0.0.0/0"]}`,
		`{"denyOut":["8.8.8.8","::/0"]}`, `{"allowOut":["10.1.2.3"],"denyOut":["0.0.0.0/0"]}`,
		`{"allowOut":["example.com:443"],"denyOut":["0.0.0.0/0"]}`, `{"denyOut":["[::1]:53"]}`,
		`{"allowOut":["127.0.0.1"],"denyOut":["0.0.0.0/0"]}`, `{"allowOut":["::ffff:10.0.0.1"],"denyOut":["0.0.0.0/0"]}`,
		`{"allowOut":[" EXAMPLE.com. "],"denyOut":[" 1.2.3.4/8 "]}`, `{"rules":{"x":[]}}`, `{"egressProxy":{"url":"x"}}`,
		`{"allow_internet_access":false,"allowOut":["example.com"]}`,
	} {
		f.Add([]byte(s), false)
	}
	s, _ := fuzzServer(f, nil)
	sp, _ := fuzzServer(f, func(o *Options) { o.AllowPrivate = true })
	f.Fuzz(func(t *testing.T, body []byte, allowPrivate bool) {
		var req networkUpdate
		if json.Unmarshal(body, &req) != nil {
			return // decode answers 400
		}
		if refuseUnsupported(req.Rules, req.EgressProxy, nil) != "" {
			return
		}
		srv := s
		if allowPrivate {
			srv = sp
		}
		n, st, err := srv.policyOf(req.AllowInternetAccess, req.AllowOut, req.DenyOut, true)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("a refusal without a reason")
			}
			return
		}
		if req.AllowInternetAccess != nil && !*req.AllowInternetAccess {
			denyAll := false
			for _, d := range n.DeniedHosts {
				if p, err := parseIPOrCIDR(strings.TrimSpace(d)); err == nil && p.Bits() == 0 {
					denyAll = true
				}
			}
			if st.internet || n.Policy != sandboxes.NetworkNone && !denyAll {
				t.Fatalf("allow_internet_access false gave %+v %+v", n, st)
			}
		}
		if len(n.AllowedHosts) > maxNetworkEntries || len(n.DeniedHosts) > maxNetworkEntries+1 {
			t.Fatalf("%d allowed, %d denied", len(n.AllowedHosts), len(n.DeniedHosts))
		}
		if n.AllowPrivate && !allowPrivate {
			t.Fatal("private ranges opened without the operator's --allow-private")
		}
		for _, d := range n.DeniedHosts {
			if _, err := parseIPOrCIDR(d); err != nil {
				t.Fatalf("denied %q accepted", d)
			}
		}
		for _, a := range n.AllowedHosts {
			if hasPort(a) {
				t.Fatalf("allowed %q with a port accepted", a)
			}
			if p, err := parseIPOrCIDR(a); err == nil && !allowPrivate {
				if r, ok := egress.PrivateOverlap(p); ok {
					t.Fatalf("allowed %q overlaps private %s without --allow-private", a, r)
				}
			}
		}
		if n.Policy == sandboxes.NetworkAll && (len(n.AllowedHosts) > 0 || len(n.DeniedHosts) > 0) {
			// What the filter still refuses (a loopback allowOut: never
			// reachable) must be its policy error, which the variants
			// answer as ErrInvalidConfig (a 400), never a 500.
			if _, err := egress.Compile(egress.PolicyOf(egress.ModeAll, n.AllowedHosts, n.DeniedHosts, n.AllowPrivate)); err != nil && !errors.Is(err, egress.ErrPolicy) {
				t.Fatalf("accepted %q, which the egress filter fails on: %v", body, err)
			}
		}
	})
}
