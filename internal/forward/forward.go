// Package forward makes a port inside a sandbox reachable from the host: a
// loopback TCP listener per port whose connections are spliced onto tunnels
// the agent opens (client.DialPort). Variants whose sandboxes have no network
// of their own to publish on (local, docker with network none) share it.
package forward

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// DialFunc opens a connection to port inside the sandbox.
type DialFunc func(ctx context.Context, port int) (net.Conn, error)

// dialTimeout bounds each tunnel's set-up, so a wedged agent can't pile up
// goroutines behind accepted connections.
const dialTimeout = 10 * time.Second

// Set is the forwarders of one sandbox handle, one per port. The zero value
// is ready to use.
type Set struct {
	mu sync.Mutex
	ln map[int]net.Listener
}

// Addr returns the "127.0.0.1:N" address that reaches port inside the
// sandbox through dial, starting a forwarder on first use. It lives until
// Close.
func (s *Set) Addr(port int, dial DialFunc) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ln, ok := s.ln[port]; ok {
		return ln.Addr().String(), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	if s.ln == nil {
		s.ln = map[int]net.Listener{}
	}
	s.ln[port] = ln
	go serve(ln, port, dial)
	return ln.Addr().String(), nil
}

// Close stops every forwarder; tunnels already open run until either end
// closes them.
func (s *Set) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, ln := range s.ln {
		ln.Close()
		delete(s.ln, p)
	}
}

func serve(ln net.Listener, port int, dial DialFunc) {
	for {
		down, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
			up, err := dial(ctx, port)
			cancel()
			if err != nil {
				down.Close()
				return
			}
			Pipe(down, up)
		}()
	}
}

// Pipe copies both ways between a and b until both directions end, passing a
// half-close on when the connection type allows it, then closes both.
func Pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}
