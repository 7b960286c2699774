package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Bounds of the look at a connection's first bytes (allowlist, named hosts).
const (
	maxSniff     = 16 << 10
	sniffTimeout = 10 * time.Second
)

var errNoName = errors.New("no TLS server name or HTTP Host")

// sniffName reads the client's first message — a TLS ClientHello or an HTTP
// request head — and returns the server name it asks for, with the bytes
// read (to be replayed to the real server). Anything else is an error: a
// protocol we can't see the name of can't be held to the allowlist.
func sniffName(c net.Conn) (string, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	defer c.SetReadDeadline(time.Time{})
	rec := &recorder{r: io.LimitReader(c, maxSniff)}
	var first [1]byte
	if _, err := io.ReadFull(rec, first[:]); err != nil {
		return "", rec.buf.Bytes(), err
	}
	if first[0] == 0x16 { // TLS handshake record
		name, err := tlsServerName(io.MultiReader(bytes.NewReader(first[:]), rec))
		return name, rec.buf.Bytes(), err
	}
	// An HTTP request starts with an upper-case method; anything else is
	// refused now rather than after waiting for a line that may never come.
	if first[0] < 'A' || first[0] > 'Z' {
		return "", rec.buf.Bytes(), errNoName
	}
	req, err := http.ReadRequest(bufio.NewReaderSize(io.MultiReader(bytes.NewReader(first[:]), rec), 4096))
	if err != nil {
		return "", rec.buf.Bytes(), errNoName
	}
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "" {
		return "", rec.buf.Bytes(), errNoName
	}
	// http.ReadRequest may have read past the head (a body); the recorder
	// has all of it, which is what gets replayed.
	return strings.ToLower(strings.TrimSuffix(host, ".")), rec.buf.Bytes(), nil
}

// recorder keeps what is read through it.
type recorder struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

var errGotHello = errors.New("got client hello")

// tlsServerName parses a ClientHello with crypto/tls itself (a server
// handshake on a connection that reads from r and writes nowhere, stopped
// as soon as the hello is parsed) rather than with a hand-written parser.
func tlsServerName(r io.Reader) (string, error) {
	var name string
	var got bool
	srv := tls.Server(readOnlyConn{r: r}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, got = h.ServerName, true
			return nil, errGotHello
		},
	})
	_ = srv.Handshake()
	if !got || name == "" {
		return "", errNoName
	}
	return strings.ToLower(strings.TrimSuffix(name, ".")), nil
}

type readOnlyConn struct {
	net.Conn // nil: only the methods below are used by a server handshake that stops after the hello
	r        io.Reader
}

func (c readOnlyConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c readOnlyConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c readOnlyConn) Close() error                     { return nil }
func (c readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (c readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (c readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
func (c readOnlyConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c readOnlyConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
