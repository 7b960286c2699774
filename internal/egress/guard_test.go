package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestGuardCheck: the host's own connections on a tenant's behalf get the
// build steps' verdicts: never loopback (but an opened port), the host's
// addresses, link-local, metadata or private ranges; the internet yes.
func TestGuardCheck(t *testing.T) {
	g, err := NewGuard(Policy{Mode: ModeAll}, []int{5000})
	if err != nil {
		t.Fatal(err)
	}
	refused := []string{"127.0.0.1:5001", "127.1.2.3:80", "[::1]:5001", "169.254.169.254:80", "[fe80::1]:80",
		"10.0.0.1:443", "192.168.1.1:443", "172.16.0.1:443", "100.64.0.1:443", "[fd00::1]:443",
		"100.100.100.200:80", "168.63.129.16:80", "0.0.0.0:80", "[::]:80", "[::ffff:127.0.0.1]:80", "[64:ff9b::a9fe:a9fe]:80"}
	// Every address of this host's interfaces, too.
	if as, err := net.InterfaceAddrs(); err == nil {
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					refused = append(refused, netip.AddrPortFrom(ip.Unmap(), 443).String())
				}
			}
		}
	}
	for _, s := range refused {
		err := g.Check(netip.MustParseAddrPort(s))
		var re *RefusedError
		if err == nil || !errors.Is(err, ErrRefused) || !errors.As(err, &re) {
			t.Errorf("%s: %v, want refused", s, err)
		}
	}
	for _, s := range []string{"127.0.0.1:5000", "[::1]:5000", "1.1.1.1:443", "[2606:4700::1111]:443"} {
		if err := g.Check(netip.MustParseAddrPort(s)); err != nil {
			t.Errorf("%s: %v, want allowed", s, err)
		}
	}
	if _, err := NewGuard(Policy{Mode: ModeAllowlist, Allowed: []string{"example.com"}}, nil); err == nil {
		t.Error("an allowlist guard must be refused (it can't see SNI)")
	}
	if _, err := NewGuard(Policy{Mode: ModeAll}, []int{70000}); err == nil {
		t.Error("a loopback port out of range must be refused")
	}
}

// TestGuardDialNeverConnects: a refused name or address never reaches
// the listener; the opened port does.
func TestGuardDialNeverConnects(t *testing.T) {
	var accepted atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closed, _ := NewGuard(Policy{Mode: ModeAll}, nil)
	for _, addr := range []string{"127.0.0.1:" + strconv.Itoa(port), "localhost:" + strconv.Itoa(port)} {
		if c, err := closed.DialContext(ctx, "tcp", addr); err == nil || !errors.Is(err, ErrRefused) {
			if c != nil {
				c.Close()
			}
			t.Errorf("dial %s: %v, want refused", addr, err)
		}
	}
	if _, err := closed.DialContext(ctx, "udp", "1.1.1.1:53"); err == nil {
		t.Error("udp must be refused")
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("refused dials reached the listener %d times", n)
	}
	open, _ := NewGuard(Policy{Mode: ModeAll}, []int{port})
	c, err := open.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("dial the opened port: %v", err)
	}
	c.Close()
}
