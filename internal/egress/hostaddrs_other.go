//go:build !linux

package egress

import (
	"net"
	"net/netip"
)

// hostAddrs: without Linux there is no sandbox network (other.go); the
// policy's checks still compile and read the interfaces' addresses.
type hostAddrs struct {
	read func() ([]netip.Prefix, error)
}

var theHost hostAddrs

func (h *hostAddrs) contains(ip netip.Addr) (bool, error) {
	read := h.read
	if read == nil {
		read = interfacePrefixes
	}
	ps, err := read()
	if err != nil {
		return false, err
	}
	for _, p := range ps {
		if p.Contains(ip) {
			return true, nil
		}
	}
	return false, nil
}

func (h *hostAddrs) close() {}

func interfacePrefixes() ([]netip.Prefix, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			}
		}
	}
	return out, nil
}
