//go:build linux

package egress

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream is a keep-alive HTTP server that records the Host of every
// request it gets and answers "<host> <body length>".
type upstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	hosts []string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.hosts = append(u.hosts, r.Host)
		u.mu.Unlock()
		if r.URL.Path == "/ua" {
			_, _ = io.WriteString(w, "ua="+r.Header.Get("User-Agent"))
			return
		}
		_, _ = io.WriteString(w, r.Host+" "+strconv.Itoa(len(b)))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.hosts...)
}

// relay connects a client to u through relayHTTP (www.example allowed and
// pinned to u's address) and returns the client's end.
func relay(t *testing.T, u *upstream, head string) net.Conn {
	t.Helper()
	c, err := compile(Policy{Mode: ModeAllowlist, Allowed: []string{"www.example"}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{logf: t.Logf}
	s.pol.Store(c)
	dst := netip.MustParseAddrPort(u.srv.Listener.Addr().String())
	s.pins.add(dst.Addr(), "www.example")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	down, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.Dial("tcp", dst.String())
	if err != nil {
		t.Fatal(err)
	}
	go s.relayHTTP(down.(*net.TCPConn), up.(*net.TCPConn), []byte(head), dst)
	t.Cleanup(func() { client.Close() })
	_ = client.SetDeadline(time.Now().Add(20 * time.Second))
	return client
}

// httpExchange sends raw requests and reads up to n responses; it returns
// their bodies and whether the relay closed the connection before the n-th.
func httpExchange(t *testing.T, c net.Conn, raw string, n int) ([]string, bool) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var bodies []string
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return bodies, true
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bodies = append(bodies, string(b))
	}
	return bodies, false
}

const (
	reqWWW   = "GET / HTTP/1.1\r\nHost: www.example\r\n\r\n"
	reqOther = "GET / HTTP/1.1\r\nHost: other.example\r\n\r\n"
)

// Every request on a kept-alive connection is held to the allowlist, not
// only the first: a second request for another site on the same address is
// never sent, and the connection ends.
func TestRelayHTTPChecksEveryRequest(t *testing.T) {
	u := newUpstream(t)
	c := relay(t, u, "")
	got, _ := httpExchange(t, c, reqWWW+reqWWW, 2)
	if len(got) != 2 || got[0] != "www.example 0" || got[1] != "www.example 0" {
		t.Fatalf("two allowed requests: %q", got)
	}

	for name, raw := range map[string]string{
		"keep-alive fronting": reqWWW + reqOther,
		"absolute-form":       reqWWW + "GET http://other.example/ HTTP/1.1\r\nHost: www.example\r\n\r\n",
		"CONNECT":             reqWWW + "CONNECT other.example:443 HTTP/1.1\r\nHost: www.example\r\n\r\n",
		"no Host":             reqWWW + "GET / HTTP/1.0\r\n\r\n",
		"huge head":           reqWWW + "GET / HTTP/1.1\r\nHost: www.example\r\nX: " + strings.Repeat("a", maxHTTPHead+httpBufSize) + "\r\n\r\n",
	} {
		u := newUpstream(t)
		c := relay(t, u, "")
		got, closed := httpExchange(t, c, raw, 2)
		if len(got) != 1 || !closed {
			t.Errorf("%s: responses %q, closed %v; want the first only, then closed", name, got, closed)
		}
		if s := u.seen(); len(s) != 1 || s[0] != "www.example" {
			t.Errorf("%s: the server saw %q", name, s)
		}
	}
}

// A second request hidden in the first's body (a length the two ends might
// read differently) reaches the server as that body, never as a request:
// what is written out is what was parsed.
func TestRelayHTTPNoSmuggling(t *testing.T) {
	u := newUpstream(t)
	c := relay(t, u, "")
	body := reqOther
	raw := "POST / HTTP/1.1\r\nHost: www.example\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
	got, _ := httpExchange(t, c, raw, 1)
	if s := u.seen(); len(s) != 1 || s[0] != "www.example" || len(got) != 1 || got[0] != "www.example "+strconv.Itoa(len(body)) {
		t.Errorf("the server saw %q (responses %q)", s, got)
	}
	// The first request's bytes may arrive as the sniffed head.
	u2 := newUpstream(t)
	c2 := relay(t, u2, reqWWW)
	got, _ = httpExchange(t, c2, "GET /ua HTTP/1.1\r\nHost: www.example\r\n\r\n", 2)
	if len(got) != 2 || got[1] != "ua=" {
		t.Errorf("head then a request without User-Agent: %q (the relay must not add one)", got)
	}
}
