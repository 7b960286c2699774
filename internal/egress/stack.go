//go:build linux

package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
)

// Bounds per sandbox.
const (
	// maxTCPConns bounds concurrent forwarded TCP connections. Their
	// buffers (the stack's 1 MiB each way, the host socket's hostSockBuf
	// each way) are the supervisor's memory, outside the sandbox's memory
	// limit: this keeps a sandbox that fills them all at about 1.5 GiB.
	maxTCPConns     = 256
	hostSockBuf     = 1 << 20
	maxUDPFlows     = 256              // concurrent UDP flows (policy all)
	maxSynInFlight  = 512              // connections being dialled at once
	dialTimeout     = 30 * time.Second // a connect the far end doesn't answer
	udpIdle         = time.Minute      // a UDP flow without traffic ends
	maxUDPDatagram  = 65535
	dnsTimeout      = 5 * time.Second
	maxDNSInFlight  = 64
	maxDNSTCPLength = 65535
)

// Options are the stack's settings other than the policy.
type Options struct {
	// DNS are the upstream resolvers ("ip:port") the stack's own resolver
	// forwards to; nil means the host's, from /etc/resolv.conf.
	DNS []string
	// Logf logs refused connections and failures (nil: the log package).
	Logf func(format string, args ...any)
}

// Stack is the network of one sandbox.
type Stack struct {
	st   *stack.Stack
	tun  *os.File
	pol  atomic.Pointer[compiled]
	pins pinSet
	dns  []string
	logf func(string, ...any)

	tcpConns chan struct{} // semaphore
	udpFlows chan struct{}
	dnsSlots chan struct{}

	closeOnce sync.Once
	closers   []io.Closer
}

// Start runs the stack on tun, the host end of a sandbox's TUN device
// (isolate.NetworkTUN). It owns tun from now on.
func Start(tun *os.File, p Policy, o Options) (*Stack, error) {
	c, err := compile(p)
	if err != nil {
		tun.Close()
		return nil, err
	}
	s := &Stack{tun: tun, dns: o.DNS, logf: o.Logf,
		tcpConns: make(chan struct{}, maxTCPConns), udpFlows: make(chan struct{}, maxUDPFlows),
		dnsSlots: make(chan struct{}, maxDNSInFlight)}
	if s.logf == nil {
		s.logf = log.Printf
	}
	if s.dns == nil {
		s.dns = hostResolvers()
	}
	s.pol.Store(c)
	if err := s.start(); err != nil {
		s.Close()
		return nil, fmt.Errorf("egress: %w", err)
	}
	return s, nil
}

func (s *Stack) start() error {
	ep, err := fdbased.New(&fdbased.Options{FDs: []int{int(s.tun.Fd())}, MTU: isolate.TUNMTU})
	if err != nil {
		return err
	}
	st := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
	})
	s.st = st
	sack := tcpip.TCPSACKEnabled(true)
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	if e := st.CreateNIC(1, ep); e != nil {
		return fmt.Errorf("create NIC: %s", e)
	}
	// Promiscuous + spoofing: the NIC accepts packets for any destination
	// (handed to the handlers below) and answers from that destination's
	// address, as the far end would.
	st.SetPromiscuousMode(1, true)
	st.SetSpoofing(1, true)
	gw4 := tcpip.AddrFromSlice(netip.MustParseAddr(isolate.TUNGatewayIPv4).AsSlice())
	gw6 := tcpip.AddrFromSlice(netip.MustParseAddr(isolate.TUNGatewayIPv6).AsSlice())
	for _, a := range []tcpip.ProtocolAddress{
		{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: gw4.WithPrefix()},
		{Protocol: ipv6.ProtocolNumber, AddressWithPrefix: gw6.WithPrefix()},
	} {
		if e := st.AddProtocolAddress(1, a, stack.AddressProperties{}); e != nil {
			return fmt.Errorf("add address: %s", e)
		}
	}
	st.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}, {Destination: header.IPv6EmptySubnet, NIC: 1}})

	tcpFwd := tcp.NewForwarder(st, 0, maxSynInFlight, s.handleTCP)
	// Policy first, synchronously: a refused destination gets a RST from
	// the stack at once (returning false = no one handles it).
	st.SetTransportProtocolHandler(tcp.ProtocolNumber, func(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
		if v, _ := s.verdict(id.LocalAddress); v == refuse {
			return false
		}
		return tcpFwd.HandlePacket(id, pkt)
	})
	udpFwd := udp.NewForwarder(st, s.handleUDP)
	st.SetTransportProtocolHandler(udp.ProtocolNumber, udpFwd.HandlePacket)

	// Our resolver, on the gateway addresses.
	for _, a := range []struct {
		addr  tcpip.Address
		proto tcpip.NetworkProtocolNumber
	}{{gw4, ipv4.ProtocolNumber}, {gw6, ipv6.ProtocolNumber}} {
		fa := tcpip.FullAddress{NIC: 1, Addr: a.addr, Port: 53}
		uc, err := gonet.DialUDP(st, &fa, nil, a.proto)
		if err != nil {
			return fmt.Errorf("DNS on %s: %w", a.addr, err)
		}
		ln, err := gonet.ListenTCP(st, fa, a.proto)
		if err != nil {
			uc.Close()
			return fmt.Errorf("DNS on %s: %w", a.addr, err)
		}
		s.closers = append(s.closers, uc, ln)
		go s.serveDNSUDP(uc)
		go s.serveDNSTCP(ln)
	}
	return nil
}

// Logf logs through the stack's logger.
func (s *Stack) Logf(format string, args ...any) { s.logf(format, args...) }

// SetPolicy replaces the policy for new connections (connections already
// open stay). Names pinned so far stay pinned.
func (s *Stack) SetPolicy(p Policy) error {
	c, err := compile(p)
	if err != nil {
		return err
	}
	s.pol.Store(c)
	return nil
}

// Close stops the stack; every forwarded connection ends.
func (s *Stack) Close() {
	s.closeOnce.Do(func() {
		for _, c := range s.closers {
			c.Close()
		}
		if s.st != nil {
			s.st.Close()
		}
		s.tun.Close()
	})
}

func toAddr(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip.Unmap()
}

func (s *Stack) verdict(a tcpip.Address) (verdict, string) {
	return s.pol.Load().check(toAddr(a), &theHost, &s.pins)
}

func (s *Stack) handleTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort)
	v, why := s.verdict(id.LocalAddress)
	if v == refuse {
		s.logf("egress: refused tcp %s: %s", dst, why)
		r.Complete(true)
		return
	}
	select {
	case s.tcpConns <- struct{}{}:
		defer func() { <-s.tcpConns }()
	default:
		s.logf("egress: refused tcp %s: %d connections open", dst, maxTCPConns)
		r.Complete(true)
		return
	}
	var up *net.TCPConn
	if v == direct {
		// Connect first, then accept: the sandbox sees the far end's
		// refusal or silence as its own connect's.
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", dst.String())
		cancel()
		if err != nil {
			r.Complete(true)
			return
		}
		up = c.(*net.TCPConn)
		limitBuffers(up)
	}
	var wq waiter.Queue
	ep, e := r.CreateEndpoint(&wq)
	if e != nil {
		if up != nil {
			up.Close()
		}
		r.Complete(true)
		return
	}
	r.Complete(false)
	down := gonet.NewTCPConn(&wq, ep)
	if v == named {
		name, head, err := sniffName(down)
		pol := s.pol.Load()
		switch {
		case err != nil:
			s.logf("egress: refused tcp %s: %v (only TLS and HTTP reach hosts allowed by name; list an IP or CIDR for other protocols)", dst, err)
		case !pol.nameAllowed(name):
			s.logf("egress: refused tcp %s: server name %q is not allowed", dst, name)
		case !s.pins.pinned(dst.Addr(), name):
			s.logf("egress: refused tcp %s: %q did not resolve to this address here", dst, name)
		default:
			ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
			var d net.Dialer
			c, derr := d.DialContext(ctx, "tcp", dst.String())
			cancel()
			if derr == nil && len(head) > 0 && head[0] != 0x16 {
				// Plain HTTP: every request's Host is checked, not only
				// the first's (httpproxy.go).
				up = c.(*net.TCPConn)
				limitBuffers(up)
				s.relayHTTP(down, up, head, dst)
				return
			}
			if derr == nil {
				if _, werr := c.Write(head); werr == nil {
					up = c.(*net.TCPConn)
					limitBuffers(up)
				} else {
					c.Close()
				}
			}
		}
		if up == nil {
			ep.Abort() // RST
			down.Close()
			return
		}
	}
	splice(down, up)
}

// limitBuffers fixes a host socket's buffers (no autotuning up to the
// kernel's maximum): they hold what a sandbox's far end doesn't read.
func limitBuffers(c *net.TCPConn) {
	_ = c.SetReadBuffer(hostSockBuf)
	_ = c.SetWriteBuffer(hostSockBuf)
}

type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// splice copies both ways until both directions ended, passing half-closes on.
func splice(a, b halfCloser) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src halfCloser) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if err != nil {
			// A broken direction ends both.
			a.Close()
			b.Close()
			return
		}
		_ = dst.CloseWrite()
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

func (s *Stack) handleUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort)
	pol := s.pol.Load()
	if pol.mode != ModeAll {
		// allowlist: no UDP but DNS to our resolver (handled by its own
		// endpoint, never here).
		s.logf("egress: refused udp %s: UDP is not forwarded with an allowlist", dst)
		return false
	}
	if v, why := s.verdict(id.LocalAddress); v != direct {
		s.logf("egress: refused udp %s: %s", dst, why)
		return false
	}
	select {
	case s.udpFlows <- struct{}{}:
	default:
		s.logf("egress: refused udp %s: %d flows open", dst, maxUDPFlows)
		return false
	}
	up, err := dialUDP(dst)
	if err != nil {
		<-s.udpFlows
		return false
	}
	var wq waiter.Queue
	ep, e := r.CreateEndpoint(&wq)
	if e != nil {
		up.Close()
		<-s.udpFlows
		return false
	}
	down := gonet.NewUDPConn(&wq, ep)
	go func() {
		defer func() { <-s.udpFlows }()
		relayUDP(down, up)
	}()
	return true
}

// relayUDP moves datagrams both ways until the flow is idle for udpIdle.
func relayUDP(down *gonet.UDPConn, up *net.UDPConn) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	done := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(done); down.Close(); up.Close() }) }
	pump := func(dst, src net.Conn) {
		defer stop()
		buf := make([]byte, maxUDPDatagram)
		for {
			_ = src.SetReadDeadline(time.Now().Add(udpIdle))
			n, err := src.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, last.Load())) < udpIdle {
					continue // the other direction is busy
				}
				return
			}
			last.Store(time.Now().UnixNano())
			if _, err := dst.Write(buf[:n]); err != nil {
				if errors.Is(err, syscall.ECONNREFUSED) {
					continue // ICMP refused from the far end: the flow may go on
				}
				return
			}
		}
	}
	go pump(up, down)
	pump(down, up)
	<-done
}

// dialUDP dials dst with SO_BROADCAST off. Go turns it on for UDP sockets:
// a datagram to a host subnet's broadcast address would then go out and
// loop back to the host's own listeners. Off, such a send fails.
func dialUDP(dst netip.AddrPort) (*net.UDPConn, error) {
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 0)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("udp", dst.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.UDPConn), nil
}

// pinned: policy.go's pinSet, asked only here and by the HTTP proxy
// (Linux only, as the stack is).
func (p *pinSet) pinned(ip netip.Addr, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[ip.Unmap()][name]
}
