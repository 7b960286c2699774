// Package egress is the network of a sandbox that has one: a user-space
// TCP/IP stack (gVisor's netstack) on the host end of the sandbox's TUN
// device, which terminates every connection the sandbox opens and dials out
// on its behalf, from the supervisor, only after checking the destination
// against the sandbox's policy. Nothing the sandbox sends reaches the host's
// kernel network stack as a packet: only the supervisor's own sockets do.
//
// Policy "all": any destination on the internet. Never the host itself (its
// loopback, any address of any of its interfaces), link-local addresses
// (169.254/16 with cloud metadata, fe80::/10), multicast/broadcast, and,
// unless AllowPrivate, the private ranges (10/8, 172.16/12, 192.168/16,
// 100.64/10, fc00::/7).
//
// Denied (IPs and CIDRs) narrows "all": those addresses are refused unless
// Allowed lists them (an IP or CIDR of Allowed), or the connection is to an
// address an allowed name resolved to and names it (SNI/Host): allowed wins
// over denied, as E2B's allowOut over denyOut. Denying 0.0.0.0/0 or ::/0
// (E2B's ALL_TRAFFIC) denies all traffic, IPv4 and IPv6 alike: the policy
// is then an allowlist of Allowed (which may be empty: nothing reachable,
// and the resolver answers no name).
//
// Policy "allowlist": the same, and further only names, wildcards, IPs and
// CIDRs listed in Allowed. Named hosts are reachable only at addresses our
// own resolver answered for them (pinned for the sandbox's lifetime), and
// only with a TLS ClientHello whose SNI, or an HTTP request whose Host, is
// that name; other protocols reach only listed IPs/CIDRs. UDP is refused
// except DNS to the stack's own resolver.
//
// A refused TCP connection gets a RST and a refused UDP datagram an ICMP
// port unreachable, at once.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
)

// Modes.
const (
	ModeAll       = "all"
	ModeAllowlist = "allowlist"
)

// ErrPolicy marks a configuration this package refuses.
var ErrPolicy = errors.New("egress policy")

// Policy says where a sandbox may connect.
type Policy struct {
	Mode string `json:"mode"`
	// AllowPrivate lets connections reach the private ranges (never the
	// host's own addresses, loopback or link-local).
	AllowPrivate bool `json:"allow_private,omitempty"`
	// Allowed (allowlist only): "host.example.com", "*.example.org" (its
	// subdomains, not itself), an IP, or a CIDR.
	Allowed []string `json:"allowed,omitempty"`
	// Denied (mode all): IPs and CIDRs refused unless Allowed lists them.
	// With Denied, Allowed's entries in mode all are its exceptions.
	Denied []string `json:"denied,omitempty"`
}

// PolicyOf is the Policy of a sandbox's network settings.
func PolicyOf(mode string, allowed, denied []string, allowPrivate bool) Policy {
	return Policy{Mode: mode, Allowed: allowed, Denied: denied, AllowPrivate: allowPrivate}
}

// compiled is a Policy ready for lookups.
type compiled struct {
	mode         string
	allowPrivate bool
	names        map[string]bool
	suffixes     []string // ".example.org" for "*.example.org"
	prefixes     []netip.Prefix
	denied       []netip.Prefix
}

// maxAllowed bounds the allowlist's size.
const maxAllowed = 1024

// Compile checks a policy; the error says what is wrong with it.
func Compile(p Policy) (Policy, error) {
	_, err := compile(p)
	return p, err
}

func compile(p Policy) (*compiled, error) {
	c := &compiled{mode: p.Mode, allowPrivate: p.AllowPrivate, names: map[string]bool{}}
	switch p.Mode {
	case ModeAll:
		if len(p.Allowed) > 0 && len(p.Denied) == 0 {
			return nil, fmt.Errorf("%w: allowed hosts with mode all are exceptions to denied hosts (give denied hosts, or use mode allowlist)", ErrPolicy)
		}
	case ModeAllowlist:
		if len(p.Allowed) == 0 {
			return nil, fmt.Errorf("%w: allowlist needs at least one allowed host", ErrPolicy)
		}
	default:
		return nil, fmt.Errorf("%w: unknown mode %q (want all or allowlist)", ErrPolicy, p.Mode)
	}
	if len(p.Allowed) > maxAllowed || len(p.Denied) > maxAllowed {
		return nil, fmt.Errorf("%w: %d allowed and %d denied hosts, at most %d each", ErrPolicy, len(p.Allowed), len(p.Denied), maxAllowed)
	}
	denyAll := false
	for _, raw := range p.Denied {
		h := strings.TrimSpace(raw)
		pfx, err := netip.ParsePrefix(h)
		if err != nil {
			ip, aerr := netip.ParseAddr(h)
			if aerr != nil {
				return nil, fmt.Errorf("%w: denied %q: only IPs and CIDRs can be denied, not names (a name's addresses change under it; allow names instead, with 0.0.0.0/0 denied)", ErrPolicy, raw)
			}
			pfx = netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
		}
		pfx = pfx.Masked()
		if pfx.Bits() == 0 {
			denyAll = true
		}
		c.denied = append(c.denied, pfx)
	}
	if denyAll {
		// All traffic denied: what Allowed lists and nothing else.
		c.mode = ModeAllowlist
	}
	for _, raw := range p.Allowed {
		h := strings.ToLower(strings.TrimSpace(raw))
		if pfx, err := netip.ParsePrefix(h); err == nil {
			if err := checkListedPrefix(raw, pfx.Masked()); err != nil {
				return nil, err
			}
			c.prefixes = append(c.prefixes, pfx.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(h); err == nil {
			pfx := netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
			if err := checkListedPrefix(raw, pfx); err != nil {
				return nil, err
			}
			c.prefixes = append(c.prefixes, pfx)
			continue
		}
		h = strings.TrimSuffix(h, ".")
		wild := strings.HasPrefix(h, "*.")
		name := strings.TrimPrefix(h, "*.")
		if !validName(name) {
			return nil, fmt.Errorf("%w: allowed host %q is not a host name, *.domain, IP or CIDR", ErrPolicy, raw)
		}
		if wild {
			c.suffixes = append(c.suffixes, "."+name)
		} else {
			c.names[name] = true
		}
	}
	return c, nil
}

// checkListedPrefix refuses allowlist entries that would name what is never
// reachable: listing it must not look like it works.
func checkListedPrefix(raw string, p netip.Prefix) error {
	for _, b := range alwaysBlocked {
		if b.Overlaps(p) {
			return fmt.Errorf("%w: allowed %q overlaps %s (loopback, link-local, multicast or unspecified), which a sandbox never reaches", ErrPolicy, raw, b)
		}
	}
	return nil
}

func validName(n string) bool {
	if n == "" || len(n) > 253 || strings.Contains(n, "*") {
		return false
	}
	for _, l := range strings.Split(n, ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// deniedAddr: does Denied cover ip?
func (c *compiled) deniedAddr(ip netip.Addr) bool {
	for _, p := range c.denied {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// nameAllowed: is the DNS name (lower case, no trailing dot) listed?
func (c *compiled) nameAllowed(n string) bool {
	n = strings.TrimSuffix(strings.ToLower(n), ".")
	if c.names[n] {
		return true
	}
	for _, s := range c.suffixes {
		if strings.HasSuffix(n, s) && len(n) > len(s) {
			return true
		}
	}
	return false
}

func (c *compiled) listed(ip netip.Addr) bool {
	for _, p := range c.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// embeddedIPv4 is the IPv4 address a NAT64 (RFC 6052's well-known /96: the
// last 32 bits) or
// 6to4 (bits 16-48) address stands for.
func embeddedIPv4(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() || ip.Is4In6() {
		return netip.Addr{}, false
	}
	b := ip.As16()
	if nat64.Contains(ip) {
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	}
	if sixToFour.Contains(ip) {
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

var (
	alwaysBlocked = mustPrefixes(
		"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4", // 240/4 includes 255.255.255.255
		"::/128", "::1/128", "fe80::/10", "ff00::/8",
		// Cloud metadata and host-agent services outside link-local:
		// Azure's WireServer, Alibaba's metadata, AWS's IPv6 metadata
		// (blocked even with AllowPrivate, which would open the last two).
		"168.63.129.16/32", "100.100.100.200/32", "fd00:ec2::254/128",
	)
	privateRanges = mustPrefixes(
		"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7",
		// NAT64's local-use prefix (RFC 8215): the operator's own
		// translation, which may embed any IPv4 address anywhere.
		"64:ff9b:1::/48",
	)
)

// PrivateOverlap says which private range p overlaps, if any.
func PrivateOverlap(p netip.Prefix) (netip.Prefix, bool) {
	for _, r := range privateRanges {
		if r.Overlaps(p) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

func mustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// verdict is what may happen with a connection.
type verdict int

const (
	refuse verdict = iota
	direct         // dial at once
	named          // allowlist: only after the SNI/Host names a name pinned to this address
)

// check decides about a destination address and says why when it refuses.
func (c *compiled) check(ip netip.Addr, host *hostAddrs, pins *pinSet) (verdict, string) {
	ip = ip.Unmap()
	if ok, why := c.reachable(ip, host); !ok {
		return refuse, why
	}
	switch {
	case c.listed(ip):
		return direct, ""
	case c.mode == ModeAll && !c.deniedAddr(ip):
		return direct, ""
	case pins.has(ip):
		return named, ""
	case c.mode == ModeAll:
		return refuse, "address " + ip.String() + " is denied (and no allowed name resolved to it)"
	}
	return refuse, "address " + ip.String() + " is not allowed (not listed, and no allowed name resolved to it)"
}

// reachable: may the address be reached at all (allowlist aside)?
func (c *compiled) reachable(ip netip.Addr, host *hostAddrs) (bool, string) {
	if !ip.IsValid() {
		return false, "invalid address"
	}
	// An IPv6 address that a translator turns into an IPv4 one (NAT64,
	// 6to4) must pass for that IPv4 address too: 64:ff9b::a9fe:a9fe is
	// 169.254.169.254 on a host behind NAT64.
	if v4, ok := embeddedIPv4(ip); ok {
		if ok, why := c.reachable(v4, host); !ok {
			return false, why + " (embedded in " + ip.String() + ")"
		}
	}
	for _, b := range alwaysBlocked {
		if b.Contains(ip) {
			return false, "loopback, link-local, multicast or unspecified address " + ip.String()
		}
	}
	own, err := host.contains(ip)
	if err != nil {
		// Not knowing what the host answers on means not knowing whether
		// this is the host: refuse.
		return false, "the host's own addresses can't be read (" + err.Error() + "), so " + ip.String() + " is refused"
	}
	if own {
		return false, "an address of the host " + ip.String()
	}
	if !c.allowPrivate && !c.listed(ip) {
		for _, p := range privateRanges {
			if p.Contains(ip) {
				return false, "private address " + ip.String() + " (not allowed by the policy)"
			}
		}
	}
	return true, ""
}

// pinSet remembers which addresses our resolver answered for which allowed
// names. Entries stay for the sandbox's lifetime (a name's address a client
// cached must keep working); the set is bounded, and when full new answers
// are not pinned (so their addresses are refused: fail closed).
type pinSet struct {
	mu sync.Mutex
	m  map[netip.Addr]map[string]bool
	n  int
}

const maxPins = 16384

func (p *pinSet) add(ip netip.Addr, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[netip.Addr]map[string]bool{}
	}
	ip = ip.Unmap()
	if p.m[ip][name] || p.n >= maxPins {
		return
	}
	if p.m[ip] == nil {
		p.m[ip] = map[string]bool{}
	}
	p.m[ip][name] = true
	p.n++
}

func (p *pinSet) has(ip netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m[ip.Unmap()]) > 0
}

// Unreachable is what network all never reaches, as address ranges: the
// always blocked ones (loopback, link-local and metadata, multicast,
// reserved) and, unless allowPrivate, the private ranges. Variants that
// enforce with address rules only (a Kubernetes NetworkPolicy) exclude
// these; the host's own addresses come on top.
func Unreachable(allowPrivate bool) []netip.Prefix {
	out := append([]netip.Prefix(nil), alwaysBlocked...)
	if !allowPrivate {
		out = append(out, privateRanges...)
	}
	return out
}
