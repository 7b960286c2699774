package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// FuzzCompile: an egress policy (mode, allowed and denied entries, as a
// sandbox's network settings give them) and a destination address.
// Properties: a refused policy is ErrPolicy, never a panic; an accepted one
// is within its bounds; and whatever it lists, the verdict for the address
// never lets a sandbox reach loopback, link-local, multicast, unspecified
// or cloud metadata addresses (NAT64/6to4 and v4-mapped forms included),
// nor a private range the policy does not open or list, nor, with
// everything denied or an allowlist, any address that is neither listed
// nor pinned to an allowed name.
func FuzzCompile(f *testing.F) {
	f.Add("allowlist", "example.com\n*.example.org\n1.1.1.1\n2001:db8::/32", "", false, []byte{1, 1, 1, 1})
	f.Add("all", "example.com", "0.0.0.0/0\n::/0", false, []byte{8, 8, 8, 8})
	f.Add("all", "", "", false, []byte{127, 0, 0, 1})
	f.Add("all", "", "", true, []byte{10, 1, 2, 3})
	f.Add("all", "", "", false, []byte{0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 169, 254, 169, 254})
	f.Add("all", "", "", false, []byte{0x20, 0x02, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add("all", "", "", false, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1})
	f.Add("allowlist", "127.0.0.1", "", false, []byte{127, 0, 0, 1})
	f.Add("allowlist", "10.0.0.0/8", "", false, []byte{10, 9, 9, 9})
	f.Add("allowlist", "*.", "", false, []byte{})
	f.Add("none", "", "", false, []byte{})
	f.Fuzz(func(t *testing.T, mode, allowed, denied string, allowPrivate bool, addr []byte) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, "\n")
		}
		p := PolicyOf(mode, split(allowed), split(denied), allowPrivate)
		c, err := compile(p)
		if err != nil {
			if !errors.Is(err, ErrPolicy) {
				t.Fatalf("refusal is not ErrPolicy: %v", err)
			}
			if _, err2 := Compile(p); err2 == nil {
				t.Fatal("Compile accepts what compile refuses")
			}
			return
		}
		if len(p.Allowed) > maxAllowed || len(p.Denied) > maxAllowed || c.mode != ModeAll && c.mode != ModeAllowlist {
			t.Fatalf("accepted %d allowed, %d denied, mode %q", len(p.Allowed), len(p.Denied), c.mode)
		}
		for _, pfx := range c.prefixes {
			for _, b := range alwaysBlocked {
				if b.Overlaps(pfx) {
					t.Fatalf("listed %s overlaps the never-reachable %s", pfx, b)
				}
			}
		}
		ip, ok := netip.AddrFromSlice(addr)
		if !ok {
			return
		}
		v, _ := c.check(ip, &hostAddrs{}, &pinSet{})
		if v == refuse {
			return
		}
		u := ip.Unmap()
		forms := []netip.Addr{u}
		if v4, ok := embeddedIPv4(u); ok {
			forms = append(forms, v4)
		}
		for _, a := range forms {
			for _, b := range alwaysBlocked {
				if b.Contains(a) {
					t.Fatalf("%s (as %s) is reachable, inside %s", ip, a, b)
				}
			}
			if !allowPrivate && !c.listed(u) {
				if _, priv := PrivateOverlap(netip.PrefixFrom(a, a.BitLen())); priv {
					t.Fatalf("private %s (as %s) reachable without allow_private or a listing", ip, a)
				}
			}
		}
		if (c.mode == ModeAllowlist || c.deniedAddr(u)) && !c.listed(u) {
			t.Fatalf("%s reachable (verdict %d) though neither listed nor pinned (mode %s)", ip, v, c.mode)
		}
	})
}
