// TCP tunnels to a port inside the sandbox through the agent.

package client

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// DialPort opens a TCP tunnel to a port inside the sandbox through the agent.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	tr, ok := c.hc.Transport.(*http.Transport)
	if !ok || tr.DialContext == nil {
		return nil, fmt.Errorf("dial port %d: %w: this transport can't tunnel", port, sberr.ErrNotSupported)
	}
	u, err := url.Parse(c.o.EnvdURL)
	if err != nil {
		return nil, err
	}
	conn, err := tr.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("dial port %d: %w", port, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.o.EnvdURL+"/x/forward/"+strconv.Itoa(port), nil)
	for k, v := range c.EnvdHeaders() {
		req.Header[k] = v
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial port %d: %w", port, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial port %d: %w", port, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return nil, readError(fmt.Sprintf("dial port %d", port), resp)
	}
	_ = conn.SetDeadline(time.Time{})
	return &bufConn{Conn: conn, r: br}, nil
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *bufConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
