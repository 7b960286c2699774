//go:build linux

package egress

import (
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Only standard one-question queries reach the host's resolver, rebuilt
// from the parsed question: a DNS UPDATE, NOTIFY or zone transfer from the
// sandbox (which a resolver on the host's loopback may trust) never does.
func TestDNSForwardsOnlyPlainQueries(t *testing.T) {
	up, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	got := make(chan []byte, 8)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := up.ReadFrom(buf)
			if err != nil {
				return
			}
			q := append([]byte(nil), buf[:n]...)
			got <- q
			var p dnsmessage.Parser
			h, _ := p.Start(q)
			h.Response = true
			qs, _ := p.AllQuestions()
			m := dnsmessage.Message{Header: h, Questions: qs}
			b, _ := m.Pack()
			_, _ = up.WriteTo(b, from)
		}
	}()
	c, err := compile(Policy{Mode: ModeAll})
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{dns: []string{up.LocalAddr().String()}, logf: t.Logf}
	s.pol.Store(c)

	name := dnsmessage.MustNewName("www.example.org.")
	query := func(h dnsmessage.Header, typ dnsmessage.Type, answers int) []byte {
		b := dnsmessage.NewBuilder(nil, h)
		_ = b.StartQuestions()
		_ = b.Question(dnsmessage.Question{Name: name, Type: typ, Class: dnsmessage.ClassINET})
		_ = b.StartAnswers()
		for range answers {
			_ = b.AResource(dnsmessage.ResourceHeader{Name: name, Class: dnsmessage.ClassINET, TTL: 1}, dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}})
		}
		m, _ := b.Finish()
		return m
	}
	forwarded := func() []byte {
		select {
		case q := <-got:
			return q
		case <-time.After(200 * time.Millisecond):
			return nil
		}
	}
	for _, c := range []struct {
		name string
		q    []byte
	}{
		{"update", query(dnsmessage.Header{ID: 1, OpCode: 5}, dnsmessage.TypeA, 0)},
		{"notify", query(dnsmessage.Header{ID: 2, OpCode: 4}, dnsmessage.TypeA, 0)},
		{"axfr", query(dnsmessage.Header{ID: 3, RecursionDesired: true}, dnsmessage.TypeAXFR, 0)},
		{"query carrying answers", query(dnsmessage.Header{ID: 4, RecursionDesired: true}, dnsmessage.TypeA, 2)},
	} {
		if r := s.answer(c.q, false); r == nil {
			t.Errorf("%s: no reply at all (want a refusal)", c.name)
		}
		if q := forwarded(); q != nil {
			t.Errorf("%s reached the host's resolver: % x", c.name, q)
		}
	}
	// A plain query goes on, as a message we built: same question, no
	// extra records.
	if r := s.answer(query(dnsmessage.Header{ID: 9, RecursionDesired: true}, dnsmessage.TypeA, 0), false); r == nil {
		t.Fatal("plain query: no reply")
	}
	q := forwarded()
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.ID != 9 || h.OpCode != 0 {
		t.Fatalf("forwarded query: %+v %v", h, err)
	}
	if qs, err := p.AllQuestions(); err != nil || len(qs) != 1 || qs[0].Name != name {
		t.Fatalf("forwarded question: %v %v", qs, err)
	}
}

// The supervisor's UDP sockets can't broadcast (Go's default can): a
// datagram to a host subnet's broadcast address would loop back to the
// host's own services.
func TestUDPNoBroadcast(t *testing.T) {
	c, err := dialUDP(netip.MustParseAddrPort("127.0.0.1:9"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if v != 0 {
		t.Fatalf("SO_BROADCAST = %d, want 0", v)
	}
}
