package e2b

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// checkNetworkKept reads a new sandbox back (GET /sandboxes/{id}) and
// refuses it unless its host reports the egress rules it was sent. An
// allowlist goes to E2B as allow_internet_access plus network.allowOut and
// a deny-all (denyOut 0.0.0.0/0): a host that dropped the network field,
// or any deny of it, would give the sandbox more than was asked — up to
// the whole internet — and nothing else would say so. More allowed hosts
// than were sent is refused the same way; fewer narrows, and Info shows it.
func checkNetworkKept(ctx context.Context, c *conf, id string, sent *networkConfig) error {
	var d sandboxDetail
	if _, err := (api{c: c}).call(ctx, "sandbox info", http.MethodGet, "/sandboxes/"+url.PathEscape(id), id, nil, &d); err != nil {
		return fmt.Errorf("checking the network rules of sandbox %s: %w", id, err)
	}
	got := d.Network
	if got == nil {
		got = &networkConfig{}
	}
	var missing, extra []string
	for _, want := range sent.DenyOut {
		if !slices.ContainsFunc(got.DenyOut, func(g string) bool { return sameDestination(g, want) }) {
			missing = append(missing, want)
		}
	}
	for _, g := range got.AllowOut {
		if !slices.ContainsFunc(sent.AllowOut, func(want string) bool { return sameDestination(g, want) }) {
			extra = append(extra, g)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return nil
	}
	what := ""
	if len(missing) > 0 {
		what = "without denyOut " + strings.Join(missing, ", ")
	}
	if len(extra) > 0 {
		if what != "" {
			what += " and "
		}
		what += "with allowOut " + strings.Join(extra, ", ") + " that was not asked for"
	}
	return fmt.Errorf("%w: the E2B host made sandbox %s %s (it answered allowOut %q, denyOut %q): it does not keep the egress rules of this NetworkPolicy, so the sandbox, which could reach more than asked, was removed; use NetworkPolicy none or all, or a host that supports network.allowOut and denyOut",
		sberr.ErrNotSupported, id, what, got.AllowOut, got.DenyOut)
}

// sameDestination compares two allowOut/denyOut entries: the same IP or
// CIDR however written (8.8.8.8 and 8.8.8.8/32), else the same name
// (case-insensitive).
func sameDestination(a, b string) bool {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	pa, ea := prefixOf(a)
	pb, eb := prefixOf(b)
	if ea == nil && eb == nil {
		return pa == pb
	}
	return strings.EqualFold(a, b)
}

func prefixOf(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}
