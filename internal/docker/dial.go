package docker

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// agentClient is the protocol client of one sandbox, over its unix socket.
// Every connection checks who listens on the other end (SO_PEERCRED): the
// agent opens its socket as uid 0, before it drops to the sandbox user, and
// is the container's init; user code can be neither. So even where the run
// directory is writable from inside (a caller whose uid is the sandbox's),
// a socket planted by user code never sees the token. Executions go over
// the agent's lean execution connection (client.Options.Dial), dialled and
// checked the same way.
func agentClient(sock, token string, initPid int) *client.Client {
	dial := agentDial(sock, initPid)
	hc := &http.Client{Transport: &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost: 16,
		DisableCompression:  true, // a local socket: gzip would only cost CPU (see client.UnixHTTPClient)
		IdleConnTimeout:     90 * time.Second,
	}}
	return client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: hc, Dial: dial, AccessToken: token})
}

// agentDial returns a dialer of the agent's socket that refuses a listener
// other than the agent (checkPeer) before anything is sent on it.
func agentDial(sock string, initPid int) func(context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	return func(ctx context.Context) (net.Conn, error) {
		c, err := d.DialContext(ctx, "unix", sock)
		if err != nil {
			return nil, err
		}
		if err := checkPeer(c, initPid); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// checkPeer accepts the listener when it is the container's init (its pid
// as the engine reports it, when we share the engine's pid namespace) or
// runs as host uid 0 (rootful engines: user code is uid 1000 and can never
// become 0 under no_new_privs; rootless and userns-remapped engines map the
// container's users away from host uid 0 entirely).
func checkPeer(c net.Conn, initPid int) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("%w: agent connection is not a unix socket", sberr.ErrUnavailable)
	}
	return checkPeerCred(uc, initPid)
}

// peerError: the socket is not the agent's.
type peerError struct {
	pid  int32
	uid  uint32
	want int
}

func (e *peerError) Error() string {
	return fmt.Sprintf("the sandbox's agent socket is served by pid %d uid %d, not by the agent (pid %d): something inside the sandbox replaced it; refusing to send it the token",
		e.pid, e.uid, e.want)
}

func (e *peerError) Unwrap() error { return sberr.ErrUnavailable }
