package kubernetes

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/agent/standalone"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// A policy controller may program a pod's NetworkPolicy only after the pod
// started (kube-router reacts to the pod getting its IP, a moment later):
// until then the sandbox's code would reach the network. For network none
// and allowlist, launch returns only once a connection from inside the pod
// to its node's kubelet port (status.hostIP:10250, which every node serves)
// fails, or gives up with the reason after enforceTimeout. Where the node
// is unreachable from pods anyway the first try fails and nothing waits.
const (
	kubeletPort    = 10250
	enforceTimeout = 30 * time.Second
)

// The connection attempt runs inside the pod: first in the sandbox's
// python (a start of a few tens of milliseconds, which matters: a sandbox
// with a lifetime of seconds must still be checked within it), then, in
// an image without python, with the image's own agent
// (environment.AgentPath, in every image the variant runs) in its probe
// role (standalone.ProbeConnect). An answer is only what one of them
// prints: a probe that doesn't run is no proof that the policy holds.
const enforceProbe = "import socket,sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()\n    print('" + standalone.ProbeReached + "')\nexcept OSError:\n    print('" + standalone.ProbeRefused + "')\n"

// reaches says whether the sandbox's pod connects to host:port now; an
// error when neither probe could say.
func (i *instance) reaches(ctx context.Context, host string, port int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	args := []string{host, fmt.Sprint(port)}
	_, out, err := i.cl.RunProcess(ctx, "python3", append([]string{"-c", enforceProbe}, args...), nil, "")
	if reached, ok := standalone.ProbeAnswer(out); err == nil && ok {
		return reached, nil
	}
	_, out, aerr := i.cl.RunProcess(ctx, environment.AgentPath, args, map[string]string{roleEnv: roleProbe}, "")
	if reached, ok := standalone.ProbeAnswer(out); aerr == nil && ok {
		return reached, nil
	}
	if aerr == nil {
		aerr = fmt.Errorf("it printed %q", clip(out, 200))
	}
	return false, fmt.Errorf("neither python3 nor the image's agent (%s, exported before it could probe?) could try the connection: %w", environment.AgentPath, aerr)
}

// waitEnforced waits until the pod's egress policy holds (see above).
// allowed are the policy's CIDRs: a node inside them is no test.
func (i *instance) waitEnforced(ctx context.Context, hostIP string, allowed []string) error {
	ip, err := netip.ParseAddr(hostIP)
	if err != nil {
		return nil // no node address to try
	}
	for _, a := range allowed {
		if p, err := netip.ParsePrefix(a); err == nil && p.Contains(ip) {
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, enforceTimeout)
	defer cancel()
	stillReached := false
	for {
		reached, err := i.reaches(ctx, hostIP, kubeletPort)
		stillReached = stillReached || (err == nil && reached)
		switch {
		case err == nil && !reached:
			return nil
		case ctx.Err() != nil && err != nil && !stillReached:
			return fmt.Errorf("%w: whether the sandbox's NetworkPolicy is in force could not be checked within %s after its pod started: %v; the sandbox was removed",
				sberr.ErrUnavailable, enforceTimeout, err)
		case ctx.Err() != nil:
			return fmt.Errorf("%w: the sandbox's NetworkPolicy was not in force %s after its pod started (it still reached %s): the cluster's network plugin does not enforce it, or not yet; the sandbox was removed",
				sberr.ErrUnavailable, enforceTimeout, net.JoinHostPort(hostIP, fmt.Sprint(kubeletPort)))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
