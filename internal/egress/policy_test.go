package egress

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
)

func TestCompileRefuses(t *testing.T) {
	for _, p := range []Policy{
		{Mode: "sometimes"},
		{Mode: ModeAllowlist},
		{Mode: ModeAll, Allowed: []string{"example.com"}}, // exceptions to nothing denied
		{Mode: ModeAll, Denied: []string{"example.com"}},  // names can't be denied
		{Mode: ModeAll, Denied: []string{"*.example.com"}},
		{Mode: ModeAll, Denied: []string{"1.2.3.4:80"}},
		{Mode: ModeAll, Denied: []string{"0.0.0.0/0"}, Allowed: []string{"127.0.0.1"}}, // never reachable
		{Mode: ModeAll, Denied: []string{"0.0.0.0/0"}, Allowed: []string{"0.0.0.0/0"}}, // widening through the exceptions
		{Mode: ModeAllowlist, Allowed: []string{"127.0.0.1"}},
		{Mode: ModeAllowlist, Allowed: []string{"::ffff:127.0.0.1"}},
		{Mode: ModeAllowlist, Allowed: []string{"0.0.0.0/0"}}, // overlaps loopback: list real ranges
		{Mode: ModeAllowlist, Allowed: []string{"169.254.169.254"}},
		{Mode: ModeAllowlist, Allowed: []string{"fe80::/64"}},
		{Mode: ModeAllowlist, Allowed: []string{"*"}},
		{Mode: ModeAllowlist, Allowed: []string{"a*.example.com"}},
		{Mode: ModeAllowlist, Allowed: []string{"exa mple.com"}},
		{Mode: ModeAllowlist, Allowed: []string{"http://example.com"}},
	} {
		if _, err := compile(p); !errors.Is(err, ErrPolicy) {
			t.Errorf("compile(%+v) = %v, want ErrPolicy", p, err)
		}
	}
}

func TestCheck(t *testing.T) {
	c, err := compile(Policy{Mode: ModeAllowlist, Allowed: []string{"api.example.com", "*.example.org", "203.0.113.0/24", "10.1.2.3"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"api.example.com": true, "API.Example.COM.": true, "x.api.example.com": false, "example.com": false,
		"a.example.org": true, "a.b.example.org": true, "example.org": false, "badexample.org": false,
	} {
		if got := c.nameAllowed(name); got != want {
			t.Errorf("nameAllowed(%q) = %v, want %v", name, got, want)
		}
	}
	var host hostAddrs
	var pins pinSet
	pins.add(netip.MustParseAddr("198.51.100.7"), "api.example.com")
	for ip, want := range map[string]verdict{
		"203.0.113.9":      direct,
		"10.1.2.3":         direct, // private, but listed
		"10.1.2.4":         refuse,
		"198.51.100.7":     named,
		"198.51.100.8":     refuse,
		"127.0.0.1":        refuse,
		"::ffff:127.0.0.1": refuse,
		"169.254.169.254":  refuse,
		"::1":              refuse,
		"fe80::1":          refuse,
		"224.0.0.1":        refuse,
		"255.255.255.255":  refuse,
		"0.0.0.0":          refuse,
	} {
		if got, why := c.check(netip.MustParseAddr(ip), &host, &pins); got != want {
			t.Errorf("check(%s) = %v (%s), want %v", ip, got, why, want)
		}
	}
	all, _ := compile(Policy{Mode: ModeAll})
	for ip, want := range map[string]verdict{
		"198.51.100.8": direct, "10.0.0.1": refuse, "172.16.5.5": refuse, "192.168.1.1": refuse,
		"100.64.0.1": refuse, "fd00::1": refuse, "2001:db8::1": direct, "::ffff:10.0.0.1": refuse,
		// NAT64 and 6to4 addresses stand for IPv4 ones.
		"64:ff9b::a9fe:a9fe": refuse, "64:ff9b::7f00:1": refuse, "64:ff9b::a00:1": refuse, "64:ff9b::c633:6408": direct,
		"64:ff9b:1::a9fe:a9fe": refuse, "2002:a9fe:a9fe::1": refuse, "2002:c633:6408::1": direct,
	} {
		if got, why := all.check(netip.MustParseAddr(ip), &host, &pins); got != want {
			t.Errorf("all: check(%s) = %v (%s), want %v", ip, got, why, want)
		}
	}
	priv, _ := compile(Policy{Mode: ModeAll, AllowPrivate: true})
	if got, _ := priv.check(netip.MustParseAddr("10.0.0.1"), &host, &pins); got != direct {
		t.Errorf("AllowPrivate: 10.0.0.1 = %v", got)
	}
	// Cloud metadata outside link-local stays refused, with AllowPrivate
	// too: Azure's WireServer (and its NAT64 form), Alibaba's, AWS's IPv6.
	for _, ip := range []string{"168.63.129.16", "64:ff9b::a83f:8110", "100.100.100.200", "fd00:ec2::254"} {
		for _, c := range []*compiled{all, priv} {
			if got, why := c.check(netip.MustParseAddr(ip), &host, &pins); got != refuse {
				t.Errorf("metadata %s = %v (%s), want refused", ip, got, why)
			}
		}
	}
	// Every address of the host itself is refused, private or not.
	if got, _ := priv.check(netip.MustParseAddr("127.0.0.1"), &host, &pins); got != refuse {
		t.Errorf("AllowPrivate: loopback = %v", got)
	}
	addrs, err := testnet.HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range addrs {
		a := netip.MustParseAddr(s)
		if got, _ := priv.check(a, &host, &pins); got != refuse {
			t.Errorf("AllowPrivate: host address %s = %v", a, got)
		}
	}
}

// TestDeniedPrecedence: E2B's allowOut over denyOut. Denied addresses are
// refused unless an allowed IP/CIDR covers them or an allowed name resolved
// to them (then named: SNI/Host must say so); 0.0.0.0/0 denied is an
// allowlist of Allowed, IPv6 included.
func TestDeniedPrecedence(t *testing.T) {
	var host hostAddrs
	var pins pinSet
	pins.add(netip.MustParseAddr("198.51.100.7"), "api.example.com")
	c, err := compile(Policy{Mode: ModeAll, Denied: []string{"198.51.100.0/24", "203.0.113.5"}, Allowed: []string{"198.51.100.9", "api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]verdict{
		"198.51.100.9": direct, // allowed wins over denied
		"198.51.100.7": named,  // denied, but an allowed name resolved to it
		"198.51.100.8": refuse, // denied
		"203.0.113.5":  refuse,
		"203.0.113.6":  direct, // not denied
		"10.0.0.1":     refuse, // private stays refused
		"127.0.0.1":    refuse,
	} {
		if got, why := c.check(netip.MustParseAddr(ip), &host, &pins); got != want {
			t.Errorf("check(%s) = %v (%s), want %v", ip, got, why, want)
		}
	}
	all, err := compile(Policy{Mode: ModeAll, Denied: []string{"0.0.0.0/0"}, Allowed: []string{"203.0.113.0/24", "api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	if all.mode != ModeAllowlist {
		t.Errorf("0.0.0.0/0 denied: mode %q, want allowlist", all.mode)
	}
	for ip, want := range map[string]verdict{
		"203.0.113.9": direct, "198.51.100.7": named, "198.51.100.8": refuse, "2001:db8::1": refuse,
	} {
		if got, why := all.check(netip.MustParseAddr(ip), &host, &pins); got != want {
			t.Errorf("deny all: check(%s) = %v (%s), want %v", ip, got, why, want)
		}
	}
	none, err := compile(Policy{Mode: ModeAll, Denied: []string{"0.0.0.0/0"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{"203.0.113.9", "198.51.100.7", "2001:db8::1"} {
		if got, why := none.check(netip.MustParseAddr(ip), &host, &pins); got != named && got != refuse {
			t.Errorf("deny all, nothing allowed: check(%s) = %v (%s)", ip, got, why)
		}
	}
	if none.nameAllowed("api.example.com") {
		t.Error("deny all, nothing allowed: a name is allowed")
	}
}
