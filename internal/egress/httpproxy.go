//go:build linux

package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Plain HTTP to a host allowed by name is relayed request by request, not
// spliced: a keep-alive connection opened for an allowed Host could
// otherwise carry a second request for any other site on the same address
// (domain fronting through a shared CDN address). Every request is parsed
// (Go's strict parser), its Host checked like the first one's, and written
// out again, so the server sees exactly the requests that were checked
// (no smuggling through a length the two ends read differently).
// TLS can't be held to this: its server name is per connection (SNI), and
// what the client asks for inside is encrypted.

// Bounds of a relayed HTTP message head (request or response).
const (
	maxHTTPHead  = 64 << 10
	httpBufSize  = 16 << 10
	unlimitedLen = 1 << 62
)

// limited counts what the bufio.Reader above it reads: n is reset before
// each head (so a head is bounded) and lifted for the body.
type limited struct {
	r io.Reader
	n int64
}

var errHeadTooLarge = errors.New("HTTP message head too large")

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// readerConn reads through r (a bufio.Reader holding bytes already read
// from the connection) and is the connection otherwise.
type readerConn struct {
	halfCloser
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// hostOnly is a request's Host without its port, lower case, no final dot.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// relayHTTP relays HTTP/1.x between down (the sandbox) and up (the server
// at dst, which an allowed name resolved to), checking every request's Host.
// head is what was read from down already (the first request, or part of
// it). It returns when either side ends, a request is refused, or a message
// can't be parsed; both connections are closed then.
func (s *Stack) relayHTTP(down, up halfCloser, head []byte, dst netip.AddrPort) {
	defer func() {
		down.Close()
		up.Close()
	}()
	dl := &limited{r: io.MultiReader(bytes.NewReader(head), down)}
	dr := bufio.NewReaderSize(dl, httpBufSize)
	ul := &limited{r: up}
	ur := bufio.NewReaderSize(ul, httpBufSize)
	for {
		dl.n = maxHTTPHead
		req, err := http.ReadRequest(dr)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.logf("egress: closed http %s: reading a request: %v", dst, err)
			}
			return
		}
		dl.n = unlimitedLen
		if why := s.refuseRequest(req, dst); why != "" {
			s.logf("egress: closed http %s: %s", dst, why)
			return
		}
		if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
			// We ask for the body ourselves (the server's 100 would come
			// while we wait for the body to forward).
			req.Header.Del("Expect")
			if _, err := io.WriteString(down, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return
			}
		}
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{""} // Write adds Go's otherwise
		}
		if err := req.Write(up); err != nil {
			return
		}
		var resp *http.Response
		for {
			ul.n = maxHTTPHead
			resp, err = http.ReadResponse(ur, req)
			if err != nil {
				s.logf("egress: closed http %s: reading the response: %v", dst, err)
				return
			}
			ul.n = unlimitedLen
			if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
				break
			}
			// 1xx informational: pass on, the response follows.
			if err := resp.Write(down); err != nil {
				return
			}
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// An upgrade (WebSocket): from here on it is the upgraded
			// protocol's, checked as the request that asked for it was.
			if err := resp.Write(down); err != nil {
				return
			}
			splice(readerConn{halfCloser: down, r: dr}, readerConn{halfCloser: up, r: ur})
			return
		}
		err = resp.Write(down)
		resp.Body.Close()
		if err != nil || req.Close || resp.Close {
			return
		}
	}
}

// refuseRequest says why a request on a connection to dst is refused ("" =
// it may go): its Host must be an allowed name that resolved to dst here,
// as the connection's first request's was.
func (s *Stack) refuseRequest(req *http.Request, dst netip.AddrPort) string {
	if req.Method == http.MethodConnect {
		return "CONNECT is not relayed (a tunnel to another host)"
	}
	name := hostOnly(req.Host)
	switch {
	case name == "":
		return "a request without Host"
	case !s.pol.Load().nameAllowed(name):
		return fmt.Sprintf("Host %q is not allowed", name)
	case !s.pins.pinned(dst.Addr(), name):
		return fmt.Sprintf("%q did not resolve to this address here", name)
	}
	return ""
}
