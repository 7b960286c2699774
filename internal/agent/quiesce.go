package agent

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// Quiesce lets the host checkpoint a sandbox whose agent listens on a host
// socket (gVisor's runsc --host-uds=create): gVisor refuses to save a
// bound or connected host socket ("Cannot save endpoint with bound host
// socket"), and a failed checkpoint ends the whole sandbox. So before a
// checkpoint the agent closes its listener and every connection it
// accepted (hijacked ones included: forwarded ports, streams), reports
// that it did, and waits; after the restore it opens a new listener.
type Quiesce struct {
	// Request asks the agent to close its listener and connections.
	Request <-chan struct{}
	// Done is called once they are closed (the host may checkpoint).
	Done func()
	// Resume asks the agent to serve again; Relisten opens the listener.
	Resume   <-chan struct{}
	Relisten func() (net.Listener, error)
	// Identity, when it answers ok, is a new sandbox id and access token
	// to serve under from the restore on: a fork of a snapshot is a new
	// sandbox, and the snapshot's token must not open it.
	Identity func() (id, token string, ok bool)
}

// trackingListener remembers every connection it accepted until it is
// closed, so that a quiesce can close them all: http.Server.Close does not
// close hijacked connections.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func newTrackingListener(ln net.Listener) *trackingListener {
	return &trackingListener{Listener: ln, conns: map[*trackedConn]struct{}{}}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	return tc, nil
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return err
}

// closeAll closes the listener and every connection still open.
func (l *trackingListener) closeAll() {
	_ = l.Listener.Close()
	l.mu.Lock()
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// CloseWrite half-closes, where the connection can (a forwarded port
// passes the end of one direction on).
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil // as for an unwrapped connection without half-close
}

// SyscallConn is the accepted connection's, so that the lean execution
// connection can use raw reads and writes (internal/rawio).
func (c *trackedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
