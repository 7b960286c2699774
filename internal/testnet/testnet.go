//go:build linux

// Package testnet builds a private "internet" for network tests: a network
// namespace made by the test, joined to the host by a veth pair, with
// servers on documentation and special-purpose addresses, and a DNS server
// with a test zone on the host's loopback. Nothing it sets up routes
// anywhere but into that namespace, so no test packet leaves the machine;
// Close removes all of it (deleting the namespace deletes the veth pair and
// the host routes through it).
//
// It needs root (and iproute2's ip).
package testnet

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// Net is a running test internet.
type Net struct {
	NS  string // network namespace name
	DNS string // "127.0.0.1:port", UDP and TCP
	// Replies: what each server answers, by address (HTTP on :80 answers
	// "<reply> <Host>\n"; TLS on :443 answers "<reply>-tls\n"; plain TCP on
	// :7 echoes; UDP on :7 echoes; DNS on ServerIPv4:53 answers every A
	// query with ServerIPv4, "an outside resolver").
	veth    string
	lock    *os.File // the host-wide lock, held until Close
	closers []io.Closer
	mu      sync.Mutex
	hits    map[string]int
}

// Hits counts connections a server accepted, by "addr:port".
func (n *Net) Hits(addrPort string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hits[addrPort]
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Start builds the test internet. The caller must Close it.
func Start() (n *Net, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("testnet: needs root (network namespaces, veth)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("testnet: needs iproute2's ip: %w", err)
	}
	// One test internet on the machine at a time: its addresses and host
	// routes are fixed, and test binaries of several packages run at once.
	lock, err := hostLock()
	if err != nil {
		return nil, err
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	// Holding the lock, any test internet still here was left by a test
	// binary that died before its Close: remove it, or its routes would
	// make every later Start fail.
	removeStale()
	self := &Net{NS: "csb-inet-" + id, veth: "csbi" + id, hits: map[string]int{}, lock: lock}
	n = self
	defer func() {
		if err != nil {
			self.Close() // (n is nil by now: "return nil, err" set it)
		}
	}()
	// The host end gets /32 and /128 routes to the servers only (no wider
	// prefix, no default): only these addresses go into the namespace.
	cmds := [][]string{
		{"ip", "netns", "add", n.NS},
		{"ip", "link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.NS},
		{"ip", "addr", "add", HostSideIPv4 + "/32", "dev", n.veth},
		{"ip", "-6", "addr", "add", HostSideIPv6 + "/128", "dev", n.veth, "nodad"},
		{"ip", "link", "set", n.veth, "up"},
		{"ip", "route", "add", ServerIPv4 + "/32", "dev", n.veth},
		{"ip", "route", "add", PrivateIPv4 + "/32", "dev", n.veth},
		{"ip", "route", "add", MetadataIPv4 + "/32", "dev", n.veth},
		{"ip", "-6", "route", "add", ServerIPv6 + "/128", "dev", n.veth},
		// AnyIP: the host answers on a whole range no interface holds (a
		// route in its local table). On the veth, so deleting the
		// namespace removes it with the rest.
		{"ip", "route", "add", "local", AnyIPv4Range, "dev", n.veth},
		{"ip", "-n", n.NS, "link", "set", "lo", "up"},
		{"ip", "-n", n.NS, "link", "set", "eth0", "up"},
		{"ip", "-n", n.NS, "addr", "add", ServerIPv4 + "/32", "dev", "eth0"},
		{"ip", "-n", n.NS, "addr", "add", PrivateIPv4 + "/32", "dev", "eth0"},
		{"ip", "-n", n.NS, "addr", "add", MetadataIPv4 + "/32", "dev", "eth0"},
		{"ip", "-n", n.NS, "-6", "addr", "add", ServerIPv6 + "/128", "dev", "eth0", "nodad"},
		{"ip", "-n", n.NS, "route", "add", HostSideIPv4 + "/32", "dev", "eth0"},
		{"ip", "-n", n.NS, "-6", "route", "add", HostSideIPv6 + "/128", "dev", "eth0"},
	}
	for _, c := range cmds {
		if err := run(c...); err != nil {
			return nil, fmt.Errorf("testnet: %w", err)
		}
	}
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	var lns []net.Listener
	var pcs []net.PacketConn
	err = inNetns(n.NS, func() error {
		for _, ip := range []string{ServerIPv4, ServerIPv6, PrivateIPv4, MetadataIPv4} {
			for _, port := range []string{"80", "443", "7"} {
				ln, err := net.Listen("tcp", net.JoinHostPort(ip, port))
				if err != nil {
					return err
				}
				if port == "443" {
					ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
				}
				lns = append(lns, ln)
			}
			pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, "7"))
			if err != nil {
				return err
			}
			pcs = append(pcs, pc)
		}
		dnsPC, err := net.ListenPacket("udp", net.JoinHostPort(ServerIPv4, "53"))
		if err != nil {
			return err
		}
		pcs = append(pcs, dnsPC)
		dnsLn, err := net.Listen("tcp", net.JoinHostPort(ServerIPv4, "53"))
		if err != nil {
			return err
		}
		lns = append(lns, dnsLn)
		return nil
	})
	for _, ln := range lns {
		n.closers = append(n.closers, ln)
	}
	for _, pc := range pcs {
		n.closers = append(n.closers, pc)
	}
	if err != nil {
		return nil, fmt.Errorf("testnet: servers: %w", err)
	}
	outside := func(q dnsmessage.Question) []dnsmessage.Resource {
		return []dnsmessage.Resource{aRecord(q.Name, ServerIPv4)}
	}
	for _, ln := range lns {
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		switch port {
		case "80":
			go n.serveTCP(ln, n.httpReply)
		case "443":
			go n.serveTCP(ln, n.tlsReply)
		case "7":
			go n.serveTCP(ln, echo)
		case "53":
			go n.serveTCP(ln, func(c net.Conn, _ string) { dnsTCPConn(c, outside) })
		}
	}
	for _, pc := range pcs {
		_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
		if port == "53" {
			go serveDNSUDP(pc, outside)
		} else {
			go echoUDP(pc)
		}
	}
	// The zone, on the host's loopback (where the sandbox's resolver
	// forwards to when a test sets CODE_SANDBOXES_DNS).
	pc, ln, err := listenUDPAndTCP()
	if err != nil {
		return nil, err
	}
	n.closers = append(n.closers, pc, ln)
	n.DNS = pc.LocalAddr().String()
	go serveDNSUDP(pc, zone)
	go serveDNSTCP(ln, zone)
	// Prove the wiring from the host before anyone relies on it: a test
	// address that isn't ours must never be tried on the real network.
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ServerIPv4, "7"), 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("testnet: the test server is unreachable from the host: %w", err)
	}
	c.Close()
	return n, nil
}

// Close removes everything Start made.
func (n *Net) Close() error {
	for _, c := range n.closers {
		c.Close()
	}
	// The veth pair explicitly: the namespace's end would go with the
	// namespace, but only once the kernel gets round to destroying it.
	lerr := run("ip", "link", "delete", n.veth)
	if _, err := net.InterfaceByName(n.veth); err != nil {
		lerr = nil // never made, or gone
	}
	nerr := run("ip", "netns", "delete", n.NS)
	if _, err := os.Stat("/run/netns/" + n.NS); err != nil {
		nerr = nil
	}
	if n.lock != nil {
		n.lock.Close() // releases the flock
		n.lock = nil
	}
	return errors.Join(lerr, nerr)
}

// removeStale deletes the namespaces and host-side veths of test internets
// whose owner died (only ever called with the host-wide lock held).
func removeStale() {
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "csb-inet-") {
				_ = run("ip", "netns", "delete", f[0])
			}
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			if strings.HasPrefix(i.Name, "csbi") {
				_ = run("ip", "link", "delete", i.Name)
			}
		}
	}
}

// lockWait bounds the wait for another test binary's test internet.
const lockWait = 10 * time.Minute

// hostLock takes the machine-wide test-internet lock (flock: the kernel
// drops it if the holder dies).
func hostLock() (*os.File, error) {
	f, err := os.OpenFile("/run/code-sandboxes-testnet.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("testnet: lock: %w", err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("testnet: another test internet is up (lock /run/code-sandboxes-testnet.lock): %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// inNetns runs f on a thread that has joined the named namespace; sockets
// created there stay in it.
func inNetns(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		err = f()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

func (n *Net) serveTCP(ln net.Listener, h func(net.Conn, string)) {
	local := ln.Addr().String()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.mu.Lock()
		n.hits[local]++
		n.mu.Unlock()
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			host, _, _ := net.SplitHostPort(local)
			h(c, host)
		}()
	}
}

// httpReply answers a request and closes, unless the request asks for
// "Connection: keep-alive": then the next request on the connection gets
// its answer too (tests of what is sent on one connection).
func (n *Net) httpReply(c net.Conn, ip string) {
	r := bufio.NewReader(io.LimitReader(c, 1<<20))
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		body := Reply(ip) + " " + req.Host + "\n"
		keep := strings.EqualFold(req.Header.Get("Connection"), "keep-alive")
		conn := "close"
		if keep {
			conn = "keep-alive"
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n%s", len(body), conn, body)
		if !keep {
			return
		}
	}
}

func (n *Net) tlsReply(c net.Conn, ip string) {
	if tc, ok := c.(*tls.Conn); ok && tc.Handshake() != nil {
		return
	}
	_, _ = io.WriteString(c, Reply(ip)+"-tls\n")
}

func echo(c net.Conn, _ string) { _, _ = io.Copy(c, io.LimitReader(c, 1<<30)) }

func echoUDP(pc net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		k, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(buf[:k], from)
	}
}

func aRecord(name dnsmessage.Name, ip string) dnsmessage.Resource {
	a := netip.MustParseAddr(ip)
	h := dnsmessage.ResourceHeader{Name: name, Class: dnsmessage.ClassINET, TTL: 60}
	if a.Is4() {
		h.Type = dnsmessage.TypeA
		return dnsmessage.Resource{Header: h, Body: &dnsmessage.AResource{A: a.As4()}}
	}
	h.Type = dnsmessage.TypeAAAA
	return dnsmessage.Resource{Header: h, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}}
}

// zone answers the test zone.
func zone(q dnsmessage.Question) []dnsmessage.Resource {
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	v4 := map[string]string{NameWWW: ServerIPv4, NameOther: ServerIPv4, NamePrivate: PrivateIPv4, NameRebind: "127.0.0.1", NameMeta: MetadataIPv4}
	switch q.Type {
	case dnsmessage.TypeA:
		if ip, ok := v4[name]; ok {
			return []dnsmessage.Resource{aRecord(q.Name, ip)}
		}
	case dnsmessage.TypeAAAA:
		if name == NameWWW {
			return []dnsmessage.Resource{aRecord(q.Name, ServerIPv6)}
		}
		if name == NameRebind {
			return []dnsmessage.Resource{aRecord(q.Name, "::1")}
		}
	}
	if _, ok := v4[name]; ok {
		return []dnsmessage.Resource{} // the name exists, not this type
	}
	return nil
}

// answer builds the reply to one query; zone returns nil for NXDOMAIN.
func answer(q []byte, zone func(dnsmessage.Question) []dnsmessage.Resource) []byte {
	var m dnsmessage.Message
	if err := m.Unpack(q); err != nil || len(m.Questions) != 1 {
		return nil
	}
	m.Response, m.RecursionAvailable, m.Authoritative = true, true, true
	rrs := zone(m.Questions[0])
	if rrs == nil {
		m.RCode = dnsmessage.RCodeNameError
	}
	m.Answers, m.Authorities, m.Additionals = rrs, nil, nil
	b, _ := m.Pack()
	return b
}

func serveDNSUDP(pc net.PacketConn, zone func(dnsmessage.Question) []dnsmessage.Resource) {
	buf := make([]byte, 4096)
	for {
		k, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if b := answer(buf[:k], zone); b != nil {
			_, _ = pc.WriteTo(b, from)
		}
	}
}

func serveDNSTCP(ln net.Listener, zone func(dnsmessage.Question) []dnsmessage.Resource) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			dnsTCPConn(c, zone)
		}()
	}
}

func dnsTCPConn(c net.Conn, zone func(dnsmessage.Question) []dnsmessage.Resource) {
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return
	}
	q := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, q); err != nil {
		return
	}
	b := answer(q, zone)
	if b == nil {
		return
	}
	out := binary.BigEndian.AppendUint16(nil, uint16(len(b)))
	_, _ = c.Write(append(out, b...))
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: Zone},
		DNSNames: []string{"*." + Zone}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Forward makes target (a server of the test on the host, such as a
// loopback package index) reachable at ServerIPv4:port inside the test
// internet, which is where sandboxes can reach it; it returns that
// "ip:port". It lives until Close.
func (n *Net) Forward(target string) (string, error) {
	var ln net.Listener
	err := inNetns(n.NS, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(ServerIPv4, "0"))
		return err
	})
	if err != nil {
		return "", err
	}
	n.closers = append(n.closers, ln)
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer down.Close()
				up, err := net.DialTimeout("tcp", target, 10*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, down); up.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(down, up)
			}()
		}
	}()
	return ln.Addr().String(), nil
}

// listenUDPAndTCP listens on one loopback port for both UDP and TCP (DNS
// takes both). The port comes from UDP's ephemeral pick, which says nothing
// about TCP: another process may hold that TCP port (a CI run saw "bind:
// address already in use"), so a few other picks are tried.
func listenUDPAndTCP() (net.PacketConn, net.Listener, error) {
	var err error
	for range 20 {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			return nil, nil, err
		}
		var ln net.Listener
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, err
		}
	}
	return nil, nil, fmt.Errorf("no loopback port free for both UDP and TCP: %w", err)
}
