package testnet

import "net"

// The test internet's addresses and names, and the host's own addresses,
// are plain values: they build everywhere, so that a package using only
// them (sandboxestest) builds for macOS too. The test internet itself is
// Linux only (testnet.go; testnet_other.go refuses).

// Addresses of the test internet.
const (
	HostSideIPv4 = "198.51.100.1"    // the host's end of the veth (a host address)
	ServerIPv4   = "198.51.100.10"   // "the internet": TEST-NET-2
	ServerIPv6   = "2001:db8:5a::10" // the same server, IPv6 documentation range
	HostSideIPv6 = "2001:db8:5a::1"
	PrivateIPv4  = "10.77.0.10"      // a private-range server
	MetadataIPv4 = "169.254.169.254" // cloud metadata look-alike
	// AnyIPv4Range is a range the host takes as its own through a local
	// route (`ip route add local … dev …`) with no interface holding any
	// of its addresses; AnyIPv4 is one of them.
	AnyIPv4Range = "198.18.7.0/24"
	AnyIPv4      = "198.18.7.9"
	Zone         = "test-internet.example"
)

// Names of the zone the DNS server answers (anything else: NXDOMAIN).
var (
	NameWWW     = "www." + Zone     // A ServerIPv4, AAAA ServerIPv6
	NameOther   = "other." + Zone   // A ServerIPv4 too (a CDN neighbour)
	NamePrivate = "private." + Zone // A PrivateIPv4
	NameRebind  = "rebind." + Zone  // A 127.0.0.1
	NameMeta    = "meta." + Zone    // A MetadataIPv4
)

// Reply is the body the servers on addr answer with.
func Reply(addr string) string {
	switch addr {
	case ServerIPv4, ServerIPv6:
		return "internet"
	case PrivateIPv4:
		return "private"
	case MetadataIPv4:
		return "metadata"
	}
	return "?"
}

// HostAddrs are the host's own addresses, neither loopback nor link-local:
// what a sandbox's traffic must never reach.
func HostAddrs() ([]string, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			out = append(out, n.IP.String())
		}
	}
	return out, nil
}
