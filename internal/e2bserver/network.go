package e2bserver

// E2B's network options (the SDK's SandboxNetworkOpts and
// SandboxNetworkUpdate, the API's SandboxNetworkConfig and
// SandboxNetworkUpdateConfig) mapped onto a sandbox's network policy:
//
//   - allow_internet_access false is denyOut ["0.0.0.0/0"] (E2B's words);
//   - denyOut takes IPs and CIDRs only; 0.0.0.0/0 (ALL_TRAFFIC) or ::/0
//     denies everything, IPv4 and IPv6;
//   - allowOut (IPs, CIDRs, names, *.names) wins over denyOut, as on E2B; a
//     name is reached only at the addresses the sandbox's resolver answered
//     for it, with that name in the TLS SNI or HTTP Host;
//   - with nothing denied, allowOut restricts nothing (E2B: everything is
//     allowed then), so it is kept for the record only.
//
// What this server can't honour is refused with E2B's error shape and the
// reason, never dropped: entries with ports, egressProxy, httpsPorts, and
// rules (header transforms) other than on plain HTTP (see rules below).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"strings"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/egress"
)

// allTraffic is E2B's ALL_TRAFFIC.
const allTraffic = "0.0.0.0/0"

// maxNetworkEntries bounds allowOut and denyOut (as E2B does).
const maxNetworkEntries = 1000

// networkOpts is E2B's SandboxNetworkConfig as a create sends it.
type networkOpts struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	MaskRequestHost    *string         `json:"maskRequestHost"`
	Rules              json.RawMessage `json:"rules"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	HTTPSPorts         json.RawMessage `json:"httpsPorts"`
}

// networkUpdate is E2B's SandboxNetworkUpdateConfig: it replaces the
// sandbox's egress configuration, omitted fields cleared.
type networkUpdate struct {
	AllowInternetAccess *bool           `json:"allow_internet_access"`
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	Rules               json.RawMessage `json:"rules"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
}

// netState is what GET /sandboxes/{id} reports of a sandbox's network.
type netState struct {
	internet bool // allowInternetAccess: not everything denied
	allowOut []string
	denyOut  []string
	mask     string
}

// networkInfo is E2B's SandboxNetworkConfig in a SandboxDetail.
type networkInfo struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic bool     `json:"allowPublicTraffic"`
	MaskRequestHost    string   `json:"maskRequestHost,omitempty"`
}

func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != "{}" && s != "[]"
}

// refuseUnsupported names the first option this server can't honour.
func refuseUnsupported(rules, proxy, https json.RawMessage) string {
	switch {
	case present(proxy):
		return "network.egressProxy is not supported by this server: its sandboxes' traffic leaves through the server's own network stack, filtered there (drop egressProxy)"
	case present(https):
		return "network.httpsPorts is not supported by this server: the proxy reaches a sandbox's ports over plain HTTP (serve TLS in front of this server instead)"
	case present(rules):
		return "network.rules (header transforms) are not supported by this server: injecting a header into HTTPS needs TLS interception, which it does not do; send the header from the sandbox, or drop rules"
	}
	return ""
}

// policyOf maps E2B's allow_internet_access, allowOut and denyOut onto a
// network policy. hasNetwork: the request had allowOut or denyOut (a create
// without them keeps its plain allowInternetAccess meaning). The error is
// the 400's message.
func (s *Server) policyOf(aia *bool, allowOut, denyOut []string, hasNetwork bool) (sandboxes.Network, netState, error) {
	var n sandboxes.Network
	if len(allowOut) > maxNetworkEntries || len(denyOut) > maxNetworkEntries {
		return n, netState{}, fmt.Errorf("allowOut and denyOut take at most %d entries each", maxNetworkEntries)
	}
	deny := make([]string, 0, len(denyOut)+1)
	all := false
	for _, d := range denyOut {
		d = strings.TrimSpace(d)
		p, err := parseIPOrCIDR(d)
		if err != nil {
			if hasPort(d) {
				return n, netState{}, fmt.Errorf("denyOut %q: entries with ports are not supported by this server; give an IP or CIDR", d)
			}
			return n, netState{}, fmt.Errorf("domains are not supported in denyOut: %q is not a valid CIDR or IP address", d)
		}
		all = all || p.Bits() == 0
		deny = append(deny, d)
	}
	if aia != nil && !*aia && !all {
		deny = append(deny, allTraffic)
		all = true
	}
	allow := make([]string, 0, len(allowOut))
	for _, a := range allowOut {
		a = strings.TrimSpace(a)
		if p, err := parseIPOrCIDR(a); err == nil {
			if !s.allowPrivate {
				if r, ok := egress.PrivateOverlap(p); ok {
					return n, netState{}, fmt.Errorf("allowOut %q overlaps the private range %s, which this server keeps out of reach of sandboxes (its operator can open them: serve --allow-private)", a, r)
				}
			}
		} else if hasPort(a) {
			return n, netState{}, fmt.Errorf("allowOut %q: entries with ports are not supported by this server; give an IP, CIDR or host name", a)
		}
		allow = append(allow, a)
	}
	st := netState{internet: !all, allowOut: allow, denyOut: deny}
	switch {
	case !hasNetwork && aia != nil && !*aia:
		// No interface at all, the strongest "no internet" (a sandbox made
		// so can't be opened later: see updateNetwork).
		n.Policy = sandboxes.NetworkNone
		st.allowOut, st.denyOut = nil, nil
	case len(deny) == 0:
		// Nothing denied: allowOut restricts nothing.
		n.Policy = sandboxes.NetworkAll
	default:
		n.Policy, n.AllowedHosts, n.DeniedHosts = sandboxes.NetworkAll, allow, deny
	}
	n.AllowPrivate = s.allowPrivate && n.Policy != sandboxes.NetworkNone
	return n, st, nil
}

func parseIPOrCIDR(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()), nil
}

// hasPort: "1.2.3.4:80", "example.com:443", "[::1]:53" (E2B's newer rule
// syntax, which this server does not take).
func hasPort(s string) bool {
	if strings.HasPrefix(s, "[") {
		return strings.Contains(s, "]:")
	}
	return strings.Count(s, ":") == 1
}

// maskRE: a Host header value, with ${PORT} for the port.
var maskRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})(:[0-9]{1,5})?$`)

// checkMask validates maskRequestHost.
func checkMask(m string) error {
	if !maskRE.MatchString(strings.ReplaceAll(m, "${PORT}", "1")) {
		return fmt.Errorf("maskRequestHost %q: give a host name, optionally with :port, where ${PORT} stands for the sandbox port (e.g. ${PORT}-sandbox.example.com)", m)
	}
	return nil
}

// maskHost is the Host header a tunnel request to port carries.
func maskHost(mask string, port int) string {
	return strings.ReplaceAll(mask, "${PORT}", fmt.Sprint(port))
}

// updateNetwork is PUT /sandboxes/{id}/network: the sandbox's egress is
// replaced (omitted fields cleared), in force when the answer comes.
func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request) {
	e, i, ok := s.find(w, r)
	if !ok {
		return
	}
	var req networkUpdate
	if !decode(w, r, &req, true) {
		return
	}
	if why := refuseUnsupported(req.Rules, req.EgressProxy, nil); why != "" {
		writeError(w, http.StatusBadRequest, "%s", why)
		return
	}
	n, st, err := s.policyOf(req.AllowInternetAccess, req.AllowOut, req.DenyOut, true)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if err := ceilingError(levelOf(n), s.maxNetwork, maxNetworkFlag); err != nil {
		s.metrics.refused.WithLabelValues("network_ceiling").Inc()
		writeError(w, http.StatusForbidden, "%v", err)
		return
	}
	if i.Network == sandboxes.NetworkNone {
		writeError(w, http.StatusBadRequest, "sandbox %s was created without internet access (allowInternetAccess false): it has no network interface, so there is nothing to open; to change a sandbox's network later, create it with network.denyOut [%q] (and allowOut) instead", e.id, allTraffic)
		return
	}
	e.netMu.Lock()
	defer e.netMu.Unlock()
	if err := e.sb.UpdateNetwork(r.Context(), n); err != nil {
		status := http.StatusInternalServerError
		if isClientError(err) {
			status = http.StatusBadRequest
		}
		s.log.Warn("update network failed", "sandbox", e.id, "team", e.team, "error", err)
		writeError(w, status, "updating the network of sandbox %s: %v", e.id, err)
		return
	}
	old := e.net.Load()
	if old != nil {
		st.mask = old.mask
	}
	e.net.Store(&st)
	e.level.Store(int32(levelOf(n)))
	s.log.Info("network updated", "sandbox", e.id, "team", e.team, "allow_out", len(st.allowOut), "deny_out", len(st.denyOut), "internet", st.internet)
	w.WriteHeader(http.StatusNoContent)
}

func isClientError(err error) bool {
	return errors.Is(err, sandboxes.ErrInvalidConfig) || errors.Is(err, sandboxes.ErrNotSupported) || errors.Is(err, sandboxes.ErrInvalidInput)
}
