package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// ErrRefused marks a connection a Guard refused.
var ErrRefused = errors.New("egress: connection refused by the policy")

// RefusedError is a destination a Guard refused, and why, in this
// package's words only.
type RefusedError struct {
	Dst netip.AddrPort
	Why string
}

func (e *RefusedError) Error() string {
	return "connection to " + e.Dst.String() + " refused: " + e.Why
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// Guard applies a policy to connections the host itself opens on a
// tenant's behalf (a template build's image pull, run by serve as host
// root): the same decision the stack takes for a sandbox's connections,
// taken at dial time on every address the connection will go to, so that
// a name resolving to the host, a redirect or a token realm pointing at
// it is refused like a literal address.
type Guard struct {
	c        *compiled
	loopback map[uint16]bool
}

// maxGuardAddrs bounds the addresses of one name a Guard tries.
const maxGuardAddrs = 16

// NewGuard compiles p (mode all; an allowlist would need the SNI/Host that
// only the stack sees, so it is refused here). loopbackPorts are ports of
// the host's loopback that stay reachable (as the build jail forwards
// them); nothing else of the host is.
func NewGuard(p Policy, loopbackPorts []int) (*Guard, error) {
	if p.Mode != ModeAll {
		return nil, fmt.Errorf("%w: a guard for the host's own connections takes mode all, not %q", ErrPolicy, p.Mode)
	}
	c, err := compile(p)
	if err != nil {
		return nil, err
	}
	g := &Guard{c: c, loopback: map[uint16]bool{}}
	for _, port := range loopbackPorts {
		if port <= 0 || port > 65535 {
			return nil, fmt.Errorf("%w: loopback port %d is not a port", ErrPolicy, port)
		}
		g.loopback[uint16(port)] = true
	}
	return g, nil
}

// Check says whether the host may connect to dst; the error says why not.
func (g *Guard) Check(dst netip.AddrPort) error {
	ip := dst.Addr().Unmap()
	if ip.IsLoopback() && g.loopback[dst.Port()] {
		return nil
	}
	if v, why := g.c.check(ip, &theHost, &pinSet{}); v != direct {
		if why == "" {
			why = "not allowed"
		}
		return &RefusedError{Dst: netip.AddrPortFrom(ip, dst.Port()), Why: why}
	}
	return nil
}

// DialContext resolves addr, checks every address it resolves to (one
// refused address refuses the name: a name that also points at the host is
// not one to trust), and dials the checked addresses only, checking again
// on the socket itself before it connects.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("%w: network %q (only tcp)", ErrRefused, network)
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %w", ErrRefused, addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: port %q", ErrRefused, portStr)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		ips, err = net.DefaultResolver.LookupNetIP(lctx, "ip", host)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("resolve %s: no address", host)
	}
	if len(ips) > maxGuardAddrs {
		ips = ips[:maxGuardAddrs]
	}
	for _, ip := range ips {
		if err := g.Check(netip.AddrPortFrom(ip, uint16(port))); err != nil {
			if ip.String() != host {
				return nil, fmt.Errorf("%s resolves to a refused address: %w", host, err)
			}
			return nil, err
		}
	}
	d := net.Dialer{Timeout: 30 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: address %q", ErrRefused, address)
		}
		return g.Check(ap)
	}}
	var errs []error
	for _, ip := range ips {
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}
