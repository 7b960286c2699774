package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	httpstream "k8s.io/streaming/pkg/httpstream"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// tunnel reaches one TCP port inside a pod through the API server's
// pods/portforward subresource: the API server relays to the kubelet, which
// connects to 127.0.0.1:port in the pod's network namespace. So the agent
// listens on loopback only, no Service, Ingress or pod IP is involved, and
// the pod's NetworkPolicy (which may deny all ingress) doesn't apply.
//
// It is a dialer, not a listener: nothing listens on the host (kubectl
// port-forward's loopback listener would let every local user reach the
// agent). Every DialContext makes its own port-forward connection with one
// stream pair (data + error) and hands the caller one end of a unix
// socketpair spliced onto it, so the caller gets a real net.Conn
// (deadlines, CloseWrite) for net/http and client.DialPort's upgrade.
//
// One connection per net.Conn, not many streams on a shared one: SPDY
// streams of one connection share its frame loop, so a stream whose reader
// stalls (a slow consumer behind Host, a stream nobody reads) would stall
// every other request to the sandbox, and a broken stream would be cured
// only by closing them all. net/http keeps connections alive and reuses
// them, so the extra handshakes are paid once per concurrent request, not
// per request.
type tunnel struct {
	cfg  *rest.Config
	url  *url.URL
	port int
	// spdyOnly is set once the API server refused the WebSocket upgrade,
	// so later dials go straight to SPDY.
	spdyOnly *atomic.Bool

	mu     sync.Mutex
	conns  map[httpstream.Connection]bool
	closed bool
}

// Bounds on the tunnel's waits: an API server or kubelet that stops
// answering must not hang a caller.
const (
	tunnelDialTimeout   = 30 * time.Second
	streamCreateTimeout = 30 * time.Second
	// errorStreamWait is how long a stream's end waits for the kubelet's
	// error message, so that "connection refused" inside the pod reaches
	// the caller as an error rather than a bare EOF.
	errorStreamWait = time.Second
	maxErrorMessage = 16 << 10
	// halfCloseWait bounds how long a stream whose caller stopped writing
	// waits for the pod's side to finish.
	halfCloseWait = time.Minute
)

func newTunnel(c *cluster, pod string, port int) (*tunnel, error) {
	host := strings.TrimRight(c.cfg.Host, "/")
	u, err := url.Parse(host)
	if err == nil && u.Scheme == "" {
		// A bare host:port in the kubeconfig; client-go defaults likewise.
		u, err = url.Parse("https://" + host)
	}
	if err != nil {
		return nil, fmt.Errorf("API server address %q: %w", c.cfg.Host, err)
	}
	u.Path = strings.TrimRight(u.Path, "/") + fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/portforward", url.PathEscape(c.namespace), url.PathEscape(pod))
	return &tunnel{cfg: c.cfg, url: u, port: port, spdyOnly: &c.spdyOnly, conns: map[httpstream.Connection]bool{}}, nil
}

// dialConnection upgrades one request to a port-forward connection:
// WebSocket first (what current API servers prefer, and what proxies in
// front of them pass), SPDY when the server refuses the upgrade.
func (t *tunnel) dialConnection(ctx context.Context) (httpstream.Connection, error) {
	tr, upgrader, err := spdy.RoundTripperFor(t.cfg)
	if err != nil {
		return nil, err
	}
	d := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: tr}, http.MethodPost, t.url)
	if !t.spdyOnly.Load() {
		if ws, err := portforward.NewSPDYOverWebsocketDialerForStreaming(t.url, t.cfg); err == nil {
			d = portforward.NewFallbackDialerForStreaming(ws, d, func(err error) bool {
				if httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err) {
					t.spdyOnly.Store(true)
					return true
				}
				return false
			})
		}
	}
	type result struct {
		c     httpstream.Connection
		proto string
		err   error
	}
	// The dialers take no context: dial in the background, and close a
	// connection that arrives after the caller gave up.
	done := make(chan result, 1)
	go func() {
		c, proto, err := d.Dial(portforward.PortForwardProtocolV1Name)
		done <- result{c, proto, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, tunnelDialTimeout)
	defer cancel()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("%w: port-forward to the sandbox's pod: %w", sberr.ErrUnavailable, r.err)
		}
		if r.proto != portforward.PortForwardProtocolV1Name {
			r.c.Close()
			return nil, fmt.Errorf("%w: port-forward: the API server answered with protocol %q, want %q", sberr.ErrUnavailable, r.proto, portforward.PortForwardProtocolV1Name)
		}
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: port-forward to the sandbox's pod did not connect within %s", sberr.ErrTimeout, tunnelDialTimeout)
		}
		return nil, ctx.Err()
	}
}

// track adds c to the tunnel's live connections, or closes it when the
// tunnel is closed.
func (t *tunnel) track(c httpstream.Connection) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.Close()
		return fmt.Errorf("%w: the sandbox's connection was closed (the sandbox was killed or released)", sberr.ErrUnavailable)
	}
	t.conns[c] = true
	return nil
}

func (t *tunnel) untrack(c httpstream.Connection) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	c.Close()
}

// Close ends every connection of the tunnel; later dials fail.
func (t *tunnel) Close() {
	t.mu.Lock()
	conns := t.conns
	t.conns, t.closed = map[httpstream.Connection]bool{}, true
	t.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// DialContext opens a connection to the pod's port. The network and
// address are ignored (net/http passes its URL's host).
func (t *tunnel) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: the sandbox's connection was closed (the sandbox was killed or released)", sberr.ErrUnavailable)
	}
	c, err := t.dialConnection(ctx)
	if err != nil {
		return nil, err
	}
	if err := t.track(c); err != nil {
		return nil, err
	}
	conn, err := t.open(ctx, c)
	if err != nil {
		t.untrack(c)
		return nil, err
	}
	return conn, nil
}

// createStream is CreateStream bounded by ctx (its own wait is 30 s).
func createStream(ctx context.Context, c httpstream.Connection, h http.Header) (httpstream.Stream, error) {
	type result struct {
		s   httpstream.Stream
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := c.CreateStream(h)
		done <- result{s, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, streamCreateTimeout)
	defer cancel()
	select {
	case r := <-done:
		return r.s, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.s != nil {
				_ = r.s.Reset()
			}
		}()
		return nil, fmt.Errorf("%w: opening a port-forward stream: %w", sberr.ErrTimeout, ctx.Err())
	}
}

// open makes the connection's one stream pair and starts splicing it.
func (t *tunnel) open(ctx context.Context, c httpstream.Connection) (net.Conn, error) {
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(t.port))
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := createStream(ctx, c, h)
	if err != nil {
		return nil, fmt.Errorf("%w: port-forward error stream: %w", sberr.ErrUnavailable, err)
	}
	// We never write to the error stream.
	errStream.Close()
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := createStream(ctx, c, h)
	if err != nil {
		return nil, fmt.Errorf("%w: port-forward data stream: %w", sberr.ErrUnavailable, err)
	}
	ours, theirs, err := socketPair()
	if err != nil {
		return nil, err
	}
	sc := &streamConn{UnixConn: theirs, errc: make(chan struct{})}
	go func() {
		sc.pump(ours, data, errStream)
		t.untrack(c)
	}()
	return sc, nil
}

// socketPair returns both ends of a connected unix stream socket pair.
func socketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := socketpairCloexec()
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	conn := func(fd int) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), "port-forward")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	a, err := conn(fds[0])
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	b, err := conn(fds[1])
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// streamConn is the caller's end of one forwarded connection. A read that
// ends because the kubelet could not reach the port returns the kubelet's
// message instead of a bare EOF.
type streamConn struct {
	*net.UnixConn
	errc   chan struct{} // closed once errMsg is final
	errMsg string
}

func (s *streamConn) Read(p []byte) (int, error) {
	n, err := s.UnixConn.Read(p)
	if errors.Is(err, io.EOF) {
		select {
		case <-s.errc:
			if s.errMsg != "" {
				return n, fmt.Errorf("%w: port-forward: %s", sberr.ErrUnavailable, s.errMsg)
			}
		default:
		}
	}
	return n, err
}

// pump splices ours onto the data stream until either side is done, then
// tears the stream pair down.
func (s *streamConn) pump(ours *net.UnixConn, data, errStream httpstream.Stream) {
	defer ours.Close()
	msgc := make(chan string, 1)
	go func() {
		// Hostile or not, the message is bounded.
		b, _ := io.ReadAll(io.LimitReader(errStream, maxErrorMessage))
		msgc <- strings.TrimSpace(string(b))
	}()
	gotMsg := false
	remoteDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(ours, data)
		// Let the error message (written before the kubelet closes the
		// data stream) arrive before the caller sees the end.
		select {
		case m := <-msgc:
			s.errMsg, gotMsg = m, true
		case <-time.After(errorStreamWait):
		}
		close(s.errc)
		_ = ours.CloseWrite()
		close(remoteDone)
	}()
	localDone := make(chan struct{})
	go func() {
		_, err := io.Copy(data, ours)
		if err == nil {
			// The caller closed its write side: half-close ours.
			_ = data.Close()
		}
		close(localDone)
	}()
	select {
	case <-remoteDone:
		// The remote side is done; give our last bytes a moment to drain.
		select {
		case <-localDone:
		case <-time.After(errorStreamWait):
		}
	case <-localDone:
		// Kubelets end the forward when our side ends; bounded all the
		// same, a wedged one must not pin the stream pair forever.
		select {
		case <-remoteDone:
		case <-time.After(halfCloseWait):
		}
	}
	_ = data.Reset()
	_ = errStream.Reset()
	// A caller that stopped reading could hold the copy in a write.
	_ = ours.SetDeadline(time.Now())
	<-remoteDone // prompt now: the reset and the deadline end its copy
	if !gotMsg {
		select {
		case <-msgc:
		case <-time.After(errorStreamWait):
		}
	}
}
