package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// The lean execution connection (GET /x/exec upgraded to "cs-exec", see
// docs/agent-protocol.md): with Options.Dial, Execute sends each request on
// a connection of its own kept open between executions, framed by a length,
// and reads the NDJSON lines straight off it. Per execution that saves the
// HTTP request and response headers, chunked framing, and the transport's
// goroutine hand-offs (its read and write loops), about a third of a round
// trip. An agent without /x/exec (404) makes the client use /execute from
// then on.
const execUpgrade = "cs-exec"

// maxIdleExecConns bounds the idle lean connections kept per client.
const maxIdleExecConns = 4

type execConn struct {
	c  net.Conn
	sr *spinReader
	br *bufio.Reader
}

type execConns struct {
	mu   sync.Mutex
	idle []*execConn
	// unsupported: the agent answered /x/exec with 404.
	unsupported atomic.Bool
}

// errNoExecConn: use /execute.
var errNoExecConn = errors.New("the agent has no lean execution connection")

func (p *execConns) put(ec *execConn) {
	p.mu.Lock()
	if len(p.idle) < maxIdleExecConns {
		p.idle = append(p.idle, ec)
		ec = nil
	}
	p.mu.Unlock()
	if ec != nil {
		ec.c.Close()
	}
}

func (p *execConns) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, ec := range idle {
		ec.c.Close()
	}
}

// CloseIdleConnections closes the connections kept for later requests:
// HTTP's and the lean execution connections.
func (c *Client) CloseIdleConnections() {
	c.exec.closeIdle()
	if tr, ok := c.hc.Transport.(interface{ CloseIdleConnections() }); ok {
		tr.CloseIdleConnections()
	}
}

// take returns an idle connection the agent has not closed, or nil.
func (p *execConns) take() *execConn {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		ec := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if ec.br.Buffered() == 0 && idleOpen(ec.c) {
			return ec
		}
		ec.c.Close()
	}
}

// idleOpen reports an idle connection with nothing to read and not closed
// by the agent (which it is when the agent restarted, the sandbox was
// paused or ended): a request sent on it would meet EOF. A peek that
// doesn't wait, on the socket itself (a read deadline in the past would
// not even try the socket).
func idleOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = errors.Is(err, unix.EAGAIN)
		return true
	})
	return open
}

// dialExec opens a lean connection: the upgrade request, with the
// interpreter headers (the token), bounded by HeaderTimeout.
func (c *Client) dialExec(ctx context.Context) (*execConn, error) {
	conn, err := c.o.Dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("execute: %w", ctx.Err())
		}
		if gone(err) {
			return nil, fmt.Errorf("execute: %w: the sandbox is no longer running (its lifetime ended or it was killed)", sberr.ErrUnavailable)
		}
		return nil, fmt.Errorf("execute: %w: %w", sberr.ErrUnavailable, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(c.o.HeaderTimeout))
	req, err := http.NewRequest(http.MethodGet, c.o.InterpreterURL+"/x/exec", nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("execute: %w", err)
	}
	for k, v := range c.interpHeaders() {
		req.Header[k] = v
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", execUpgrade)
	sr := newSpinReader(conn)
	br := bufio.NewReaderSize(sr, 64<<10)
	var resp *http.Response
	if err = req.Write(conn); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("execute: %w", ctx.Err())
		}
		return nil, fmt.Errorf("execute: %w: opening the execution connection: %w", sberr.ErrUnavailable, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		if resp.StatusCode == http.StatusNotFound {
			c.exec.unsupported.Store(true)
			return nil, errNoExecConn
		}
		return nil, readError("execute", resp)
	}
	_ = conn.SetDeadline(time.Time{})
	return &execConn{c: conn, sr: sr, br: br}, nil
}

// executeConn is Execute over a lean connection. errNoExecConn: nothing was
// sent, use /execute.
func (c *Client) executeConn(ctx context.Context, body []byte, fn func(Line)) error {
	return c.leanRoundTrip(ctx, body, false, func(typ string, line []byte, _ int) error {
		l, err := DecodeLine(line)
		if err != nil {
			return fmt.Errorf("execute: %w", err)
		}
		fn(l)
		return nil
	})
}

// OpenExecConn opens a lean execution connection and keeps it for the next
// Execute (the warm pool does, so a claimer's first cell skips the
// upgrade). Without Options.Dial, or with an agent that has none, it does
// nothing.
func (c *Client) OpenExecConn(ctx context.Context) error {
	if !c.LeanExecute() {
		return nil
	}
	ec, err := c.dialExec(ctx)
	if errors.Is(err, errNoExecConn) {
		return nil
	}
	if err != nil {
		return err
	}
	c.exec.put(ec)
	return nil
}

// LeanExecute reports whether ExecuteRaw can be used: the client dials the
// agent itself and the agent has not refused the lean connection.
func (c *Client) LeanExecute() bool { return c.o.Dial != nil && !c.exec.unsupported.Load() }

// ExecuteRaw runs one /execute request body over the lean connection and
// hands fn each NDJSON line as the agent wrote it (newline included), but
// end_of_execution, with the number of bytes already received after it (0:
// flush now, the agent has sent nothing more yet). A request the agent
// refuses is a *StatusError, before any line. Lines are bounded by
// MaxLineBytes, each wait for one by StallTimeout. ErrNoLeanExecute: nothing
// was sent, use /execute.
func (c *Client) ExecuteRaw(ctx context.Context, body []byte, fn func(line []byte, buffered int)) error {
	if c.o.Dial == nil {
		return ErrNoLeanExecute
	}
	err := c.leanRoundTrip(ctx, body, true, func(_ string, line []byte, buffered int) error {
		fn(line, buffered)
		return nil
	})
	if errors.Is(err, errNoExecConn) {
		return ErrNoLeanExecute
	}
	return err
}

// ErrNoLeanExecute: the agent has no lean execution connection (or the
// client doesn't dial it); nothing was sent.
var ErrNoLeanExecute = errNoExecConn

// leanRoundTrip sends body on a lean connection (an idle one, or a new
// one) and passes each line of the answer to each.
func (c *Client) leanRoundTrip(ctx context.Context, body []byte, stream bool, each func(typ string, line []byte, buffered int) error) error {
	if c.exec.unsupported.Load() {
		return errNoExecConn
	}
	if len(body) > 8<<20 {
		return errNoExecConn // /execute answers what the agent says of it
	}
	ec := c.exec.take()
	if ec == nil {
		var err error
		if ec, err = c.dialExec(ctx); err != nil {
			return err
		}
	}
	// The caller's context ending closes the connection, which the agent
	// takes for a client gone away: it interrupts the cell.
	stop := context.AfterFunc(ctx, func() { ec.c.Close() })
	err := c.roundTripConn(ec, body, stream, each)
	if !stop() {
		ec.c.Close()
		return fmt.Errorf("execute: %w", ctx.Err())
	}
	var refused *StatusError
	if err != nil && !errors.As(err, &refused) {
		ec.c.Close() // the stream broke off: nothing more to read on it
		return err
	}
	c.exec.put(ec) // a request the agent refused leaves the connection usable
	return err
}

// roundTripConn sends body and hands each line of the answer to each. With
// stream, a line longer than the connection's buffer (64 KiB; never one
// that ends the answer, which are short) is handed on in pieces as they
// come, typ "": memory stays bounded by the buffer, not by MaxLineBytes
// (serve relays lines for many sandboxes at once).
func (c *Client) roundTripConn(ec *execConn, body []byte, stream bool, each func(typ string, line []byte, buffered int) error) error {
	msg := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(msg, uint32(len(body)))
	msg = append(msg, body...)
	_ = ec.c.SetWriteDeadline(time.Now().Add(c.o.HeaderTimeout))
	if _, err := ec.c.Write(msg); err != nil {
		return fmt.Errorf("execute: %w: sending the request: %w", sberr.ErrUnavailable, err)
	}
	ec.sr.arm()
	var refused *StatusError
	long := 0 // bytes of the long line being streamed, 0 if none
	for {
		// The agent sends a keepalive after 5 s of silence: StallTimeout
		// without a byte is a sandbox that stopped answering.
		_ = ec.c.SetReadDeadline(time.Now().Add(c.o.StallTimeout))
		var line []byte
		var err error
		if stream {
			line, err = ec.br.ReadSlice('\n')
			if long > 0 || errors.Is(err, bufio.ErrBufferFull) {
				long += len(line)
				if long > c.o.MaxLineBytes {
					return fmt.Errorf("execute: %w: an output line exceeds %d bytes", ErrProtocol, c.o.MaxLineBytes)
				}
				if err == nil || errors.Is(err, bufio.ErrBufferFull) {
					if err == nil {
						long = 0 // its end
					}
					if refused == nil {
						if err := each("", line, ec.br.Buffered()); err != nil {
							return err
						}
					}
					continue
				}
			} else if err == nil && len(line) > c.o.MaxLineBytes {
				err = fmt.Errorf("%w: an output line exceeds %d bytes", ErrProtocol, c.o.MaxLineBytes)
			}
		} else {
			line, err = readBoundedLine(ec.br, c.o.MaxLineBytes)
		}
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				return fmt.Errorf("execute: %w", err)
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("execute: %w: the sandbox sent nothing for %s", sberr.ErrUnavailable, c.o.StallTimeout)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("execute: %w: the stream ended before end_of_execution (the sandbox may have been killed or expired)", sberr.ErrUnavailable)
			}
			return fmt.Errorf("execute: %w: %w", sberr.ErrUnavailable, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		typ := lineType(line)
		switch typ {
		case "":
			return fmt.Errorf("execute: %w: a line from the agent without a type", ErrProtocol)
		case "end_of_execution":
			if refused != nil {
				return refused
			}
			return nil
		case "x_request_error":
			var r struct {
				Status  int    `json:"status"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(line, &r)
			refused = &StatusError{Op: "execute", Status: r.Status, Message: r.Message, kind: statusKind(r.Status)}
		default:
			if refused == nil {
				if err := each(typ, line, ec.br.Buffered()); err != nil {
					return err
				}
			}
		}
	}
}

// lineType is a line's "type": read off the agent's own layout (it writes
// the type first) without decoding the line, else decoded.
func lineType(line []byte) string {
	const head = `{"type": "`
	if rest, ok := bytes.CutPrefix(line, []byte(head)); ok {
		if i := bytes.IndexByte(rest, '"'); i > 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return string(rest[:i])
		}
	}
	var t struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(line, &t) != nil {
		return ""
	}
	return t.Type
}
