//go:build linux

package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
)

// hostResolvers are the nameservers of the host's /etc/resolv.conf (the
// supervisor runs in the host's network namespace, so a loopback resolver
// such as systemd-resolved's 127.0.0.53 works too).
func hostResolvers() []string {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if ip, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, netip.AddrPortFrom(ip, 53).String())
			}
		}
	}
	return out
}

func (s *Stack) serveDNSUDP(c *gonet.UDPConn) {
	buf := make([]byte, 4096)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		q := append([]byte(nil), buf[:n]...)
		select {
		case s.dnsSlots <- struct{}{}:
		default:
			continue // too many queries at once: dropped, the client retries
		}
		go func() {
			defer func() { <-s.dnsSlots }()
			if resp := s.answer(q, false); resp != nil {
				_, _ = c.WriteTo(resp, from)
			}
		}()
	}
}

func (s *Stack) serveDNSTCP(ln *gonet.TCPListener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		select {
		case s.dnsSlots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		go func() {
			defer func() { <-s.dnsSlots }()
			defer c.Close()
			for {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				q, err := readTCPMsg(c)
				if err != nil {
					return
				}
				resp := s.answer(q, true)
				if resp == nil {
					return
				}
				if err := writeTCPMsg(c, resp); err != nil {
					return
				}
			}
		}()
	}
}

func readTCPMsg(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	_, err := io.ReadFull(r, b)
	return b, err
}

func writeTCPMsg(w io.Writer, m []byte) error {
	if len(m) > maxDNSTCPLength {
		return io.ErrShortWrite
	}
	b := make([]byte, 2+len(m))
	binary.BigEndian.PutUint16(b, uint16(len(m)))
	copy(b[2:], m)
	_, err := w.Write(b)
	return err
}

// answer resolves one query. With an allowlist only allowed names get an
// answer, only A/AAAA/CNAME records, and only addresses the sandbox may
// reach (an answer of 127.0.0.1 for an allowed name — rebinding — is
// dropped); the addresses left are pinned to the name.
func (s *Stack) answer(q []byte, overTCP bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return reply(h, nil, dnsmessage.RCodeFormatError)
	}
	question := qs[0]
	// Only a standard query for one name goes on: not an UPDATE, NOTIFY or
	// zone transfer, which the host's resolver (often on its loopback, and
	// trusting it) would act on for the sandbox.
	if h.OpCode != 0 {
		return reply(h, &question, dnsmessage.RCodeNotImplemented)
	}
	if question.Type == dnsmessage.TypeAXFR || question.Type == dnsmessage.Type(251) /* IXFR */ {
		return reply(h, &question, dnsmessage.RCodeRefused)
	}
	if ans, err := p.AllAnswers(); err != nil || len(ans) != 0 {
		return reply(h, &question, dnsmessage.RCodeFormatError)
	}
	if auth, err := p.AllAuthorities(); err != nil || len(auth) != 0 {
		return reply(h, &question, dnsmessage.RCodeFormatError)
	}
	// What goes to the host's resolver is a query we build from the parsed
	// question, never the sandbox's bytes.
	qb := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, RecursionDesired: h.RecursionDesired, CheckingDisabled: h.CheckingDisabled})
	if qb.StartQuestions() != nil || qb.Question(question) != nil {
		return reply(h, &question, dnsmessage.RCodeFormatError)
	}
	if q, err = qb.Finish(); err != nil {
		return reply(h, &question, dnsmessage.RCodeFormatError)
	}
	pol := s.pol.Load()
	name := strings.ToLower(strings.TrimSuffix(question.Name.String(), "."))
	if pol.mode == ModeAllowlist {
		if !pol.nameAllowed(name) {
			s.logf("egress: refused DNS query for %q: not an allowed name", name)
			return reply(h, &question, dnsmessage.RCodeNameError)
		}
		switch question.Type {
		case dnsmessage.TypeA, dnsmessage.TypeAAAA, dnsmessage.TypeCNAME:
		default:
			return reply(h, &question, dnsmessage.RCodeSuccess)
		}
	}
	resp := s.forward(q, overTCP)
	if resp == nil {
		return reply(h, &question, dnsmessage.RCodeServerFailure)
	}
	if pol.mode != ModeAllowlist && !pol.nameAllowed(name) {
		// Mode all: answers pass; an allowed name's are pinned below, as
		// the exceptions to the denied addresses.
		return resp
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil || m.ID != h.ID {
		return reply(h, &question, dnsmessage.RCodeServerFailure)
	}
	var keep []dnsmessage.Resource
	for _, rr := range m.Answers {
		var ip netip.Addr
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			ip = netip.AddrFrom4(b.A)
		case *dnsmessage.AAAAResource:
			ip = netip.AddrFrom16(b.AAAA).Unmap()
		case *dnsmessage.CNAMEResource:
			keep = append(keep, rr)
			continue
		default:
			continue
		}
		if ok, why := pol.reachable(ip, &theHost); !ok {
			s.logf("egress: dropped DNS answer %s for %q: %s", ip, name, why)
			continue
		}
		s.pins.add(ip, name)
		keep = append(keep, rr)
	}
	m.Answers = keep
	m.Authorities, m.Additionals = nil, nil
	out, err := m.Pack()
	if err != nil {
		return reply(h, &question, dnsmessage.RCodeServerFailure)
	}
	return out
}

func reply(h dnsmessage.Header, q *dnsmessage.Question, rc dnsmessage.RCode) []byte {
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rc}}
	if q != nil {
		m.Questions = []dnsmessage.Question{*q}
	}
	b, err := m.Pack()
	if err != nil {
		return nil
	}
	return b
}

// forward sends the query to the upstream resolvers in turn; nil when none
// answered.
func (s *Stack) forward(q []byte, overTCP bool) []byte {
	for _, up := range s.dns {
		ctx, cancel := context.WithTimeout(context.Background(), dnsTimeout)
		resp := exchange(ctx, up, q, overTCP)
		cancel()
		if resp != nil {
			return resp
		}
	}
	return nil
}

func exchange(ctx context.Context, server string, q []byte, overTCP bool) []byte {
	network := "udp"
	if overTCP {
		network = "tcp"
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, server)
	if err != nil {
		return nil
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	if overTCP {
		if writeTCPMsg(c, q) != nil {
			return nil
		}
		resp, err := readTCPMsg(c)
		if err != nil {
			return nil
		}
		return resp
	}
	if _, err := c.Write(q); err != nil {
		return nil
	}
	buf := make([]byte, 65535)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil
		}
		// Only the answer to this query (same id) counts.
		if n >= 2 && len(q) >= 2 && buf[0] == q[0] && buf[1] == q[1] {
			return append([]byte(nil), buf[:n]...)
		}
	}
}
