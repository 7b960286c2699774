package isolate

// Addressing of the TUN device of network mode "tun" (see tun.go). The
// sandbox's side and the user-space stack's side share a link-local /30
// (IPv4) and a ULA /64 (IPv6): both ranges are refused as destinations by
// the egress policy anyway, so these addresses can't shadow a real one the
// sandbox is allowed to reach. The stack answers DNS on its gateway
// addresses, which the sandbox's /etc/resolv.conf names.
const (
	NetworkTUN = "tun" // own net namespace: loopback and tun0, fd in Process.TUN

	TUNName        = "tun0"
	TUNMTU         = 65520 // as slirp4netns: fewer, larger packets through user space
	TUNSandboxIPv4 = "169.254.100.2"
	TUNGatewayIPv4 = "169.254.100.1"
	TUNSandboxIPv6 = "fd5a:5a5a::2"
	TUNGatewayIPv6 = "fd5a:5a5a::1"
)
