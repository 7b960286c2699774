//go:build linux

package egress

import (
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzDNSAnswer: a DNS query from the sandbox and what the upstream
// resolver (a loopback server here) answers, through the sandbox's
// resolver (Stack.answer), with an allowlist and with mode all plus an
// allowed name. Properties: never a panic; what reaches the upstream is a
// plain query rebuilt from the parsed question (opcode 0, one question, no
// answers or authorities), never the sandbox's bytes; with an allowlist, a
// name that is not allowed never reaches the upstream and gets NXDOMAIN,
// and every address in an answer is one the sandbox may reach (never
// loopback, link-local, private or metadata: no DNS rebinding).
func FuzzDNSAnswer(f *testing.F) {
	q := func(id uint16, name string, typ dnsmessage.Type) []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
		_ = b.StartQuestions()
		_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
		m, _ := b.Finish()
		return m
	}
	a := func(id uint16, name string, ips ...[4]byte) []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, Response: true})
		_ = b.StartQuestions()
		_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		_ = b.StartAnswers()
		for _, ip := range ips {
			_ = b.AResource(dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name), Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: ip})
		}
		m, _ := b.Finish()
		return m
	}
	f.Add(q(1, "example.com.", dnsmessage.TypeA), a(1, "example.com.", [4]byte{93, 184, 216, 34}, [4]byte{127, 0, 0, 1}, [4]byte{10, 0, 0, 1}, [4]byte{169, 254, 169, 254}), true)
	f.Add(q(2, "www.ok.test.", dnsmessage.TypeAAAA), a(2, "www.ok.test.", [4]byte{192, 168, 1, 1}), true)
	f.Add(q(3, "evil.com.", dnsmessage.TypeA), a(3, "evil.com.", [4]byte{1, 2, 3, 4}), true)
	f.Add(q(4, "example.com.", dnsmessage.TypeTXT), a(4, "example.com.", [4]byte{1, 2, 3, 4}), true)
	f.Add(q(5, "example.com.", dnsmessage.TypeA), a(5, "example.com.", [4]byte{127, 0, 0, 1}), false)
	f.Add(q(6, "example.com.", dnsmessage.TypeA), []byte{0, 6, 0x81}, true)
	f.Add([]byte{0, 7, 0x28, 0}, []byte(nil), false)
	up, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { up.Close() })
	var answer atomic.Pointer[[]byte]
	var forwarded atomic.Int64
	var bad atomic.Pointer[string]
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := up.ReadFrom(buf)
			if err != nil {
				return
			}
			forwarded.Add(1)
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			qs, qerr := p.AllQuestions()
			ans, aerr := p.AllAnswers()
			if err != nil || qerr != nil || aerr != nil || h.OpCode != 0 || h.Response || len(qs) != 1 || len(ans) != 0 {
				msg := "the upstream got a query that is not a plain one-question query"
				bad.Store(&msg)
			}
			resp := append([]byte(nil), *answer.Load()...)
			for len(resp) < 2 {
				resp = append(resp, 0)
			}
			resp[0], resp[1] = buf[0], buf[1] // the query's id
			_, _ = up.WriteTo(resp, from)
		}
	}()
	allow, err := compile(Policy{Mode: ModeAllowlist, Allowed: []string{"example.com", "*.ok.test", "203.0.113.0/24"}})
	if err != nil {
		f.Fatal(err)
	}
	all, err := compile(Policy{Mode: ModeAll, Allowed: []string{"example.com"}, Denied: []string{"198.51.100.0/24"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query, upstream []byte, allowlist bool) {
		answer.Store(&upstream)
		s := &Stack{dns: []string{up.LocalAddr().String()}, logf: func(string, ...any) {}}
		pol := all
		if allowlist {
			pol = allow
		}
		s.pol.Store(pol)
		before := forwarded.Load()
		out := s.answer(query, false)
		if m := bad.Load(); m != nil {
			t.Fatalf("%s (sandbox sent %q)", *m, query)
		}
		if !allowlist || out == nil {
			return
		}
		var qp dnsmessage.Parser
		if _, err := qp.Start(query); err != nil {
			t.Fatalf("an answer to an unparseable query %q", query)
		}
		qs, err := qp.AllQuestions()
		if err != nil || len(qs) != 1 {
			return // answered FORMERR
		}
		name := strings.ToLower(strings.TrimSuffix(qs[0].Name.String(), "."))
		var m dnsmessage.Message
		if err := m.Unpack(out); err != nil {
			t.Fatalf("allowlist answer does not parse: %v", err)
		}
		if !pol.nameAllowed(name) {
			if forwarded.Load() != before {
				t.Fatalf("query for %q, not allowed, reached the upstream", name)
			}
			if m.RCode != dnsmessage.RCodeNameError && m.RCode != dnsmessage.RCodeNotImplemented && m.RCode != dnsmessage.RCodeRefused && m.RCode != dnsmessage.RCodeFormatError {
				t.Fatalf("query for %q, not allowed, answered %v", name, m.RCode)
			}
		}
		for _, rr := range m.Answers {
			var ip []byte
			switch b := rr.Body.(type) {
			case *dnsmessage.AResource:
				ip = b.A[:]
			case *dnsmessage.AAAAResource:
				ip = b.AAAA[:]
			default:
				continue
			}
			addr := netipFrom(ip)
			if ok, why := pol.reachable(addr, &theHost); !ok {
				t.Fatalf("answer for %q carries %s, which the sandbox may not reach (%s)", name, addr, why)
			}
			for _, b := range alwaysBlocked {
				if b.Contains(addr) {
					t.Fatalf("answer for %q carries never-reachable %s", name, addr)
				}
			}
			if _, priv := privateOf(addr); priv && !pol.listed(addr) {
				t.Fatalf("answer for %q carries private %s", name, addr)
			}
		}
	})
}

func netipFrom(b []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(b)
	return a.Unmap()
}

func privateOf(a netip.Addr) (netip.Prefix, bool) {
	if v4, ok := embeddedIPv4(a); ok {
		a = v4
	}
	return PrivateOverlap(netip.PrefixFrom(a, a.BitLen()))
}
