package e2bserver

// The operator's network ceiling (serve --max-network): the most network a
// request may give a sandbox. E2B's Python SDK sends allowInternetAccess
// true on every create, so a default alone (--default-network) never holds
// for its users; the ceiling does. A request above it is refused with 403,
// never narrowed to fit (the client would believe it has what it asked
// for) and never widened.
//
// Levels, ordered none < allowlist < all, of what a sandbox can reach:
//
//   - none: no network interface at all (allowInternetAccess false, or
//     nothing asked with --default-network none);
//   - allowlist: an interface whose egress is filtered to a list: everything
//     denied (network.denyOut holds 0.0.0.0/0 or ::/0) and only
//     network.allowOut reachable, the list possibly empty (a sandbox made
//     so can still be given allowOut entries later by a network update,
//     which is checked against the ceiling too);
//   - all: the internet (never the host): allowInternetAccess true without
//     denyOut, or a denyOut that denies less than everything (allowOut
//     then restricts nothing).

import (
	"errors"
	"fmt"
	"strings"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// maxNetworkFlag is the ceiling's option as serve's operator sets it.
const maxNetworkFlag = "--max-network"

// Network levels in the ceiling's order.
const (
	levelNone = iota
	levelAllowlist
	levelAll
)

var levelNames = [...]string{levelNone: sandboxes.NetworkNone, levelAllowlist: sandboxes.NetworkAllowlist, levelAll: sandboxes.NetworkAll}

// errCeiling marks a refusal by the network ceiling (a 403); its text is
// the refusal's own.
var errCeiling = errors.New("above the network ceiling")

type ceilingRefusal struct{ msg string }

func (e ceilingRefusal) Error() string        { return e.msg }
func (e ceilingRefusal) Is(target error) bool { return target == errCeiling }

// parseLevel reads a --max-network or --default-network value; "" is def.
func parseLevel(v string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	for l, name := range levelNames {
		if v == name {
			return l, nil
		}
	}
	return 0, fmt.Errorf("network %q: use none, allowlist or all", v)
}

// levelOf is the level of a sandbox's network policy.
func levelOf(n sandboxes.Network) int {
	switch n.Policy {
	case "", sandboxes.NetworkNone:
		return levelNone
	case sandboxes.NetworkAllowlist:
		return levelAllowlist
	}
	// NetworkAll (and anything unknown, which is never below it): filtered
	// to a list only when its denied entries cover every address.
	for _, d := range n.DeniedHosts {
		if p, err := parseIPOrCIDR(strings.TrimSpace(d)); err == nil && p.Bits() == 0 {
			return levelAllowlist
		}
	}
	return levelAll
}

// levelWords says what a level means in E2B's terms, for refusals.
func levelWords(l int) string {
	switch l {
	case levelNone:
		return "none (no network: allowInternetAccess false)"
	case levelAllowlist:
		return `allowlist (network.denyOut ["0.0.0.0/0"] with the allowOut exceptions)`
	}
	return "all (the internet: allowInternetAccess true, or a denyOut that denies less than everything)"
}

// ceilingError is the refusal of a network of level l by the ceiling max
// (flag: the option that set it, as the operator knows it); nil when l is
// at or below it.
func ceilingError(l, max int, flag string) error {
	if l <= max {
		return nil
	}
	return ceilingRefusal{fmt.Sprintf("the network asked for is %s, above this server's ceiling %s %s; ask for at most %s, or have the operator raise %s",
		levelWords(l), flag, levelNames[max], levelWords(max), flag)}
}

// CheckNetworkCeiling checks a sandbox configuration's network against the
// ceiling max ("none", "allowlist" or "all"; "" = no ceiling); flag names
// the option that set max, for the error. The mcp command uses it for the
// sandboxes it creates.
func CheckNetworkCeiling(n sandboxes.Network, max, flag string) error {
	m, err := parseLevel(max, levelAll)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return ceilingError(levelOf(n), m, flag)
}
