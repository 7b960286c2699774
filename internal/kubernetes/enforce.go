package kubernetes

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

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

// enforceProbe is the connection attempt, in the sandbox's own python:
// exit 0 = it connected (the policy is not in force yet).
const enforceProbe = "import socket,sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()\nexcept OSError:\n    sys.exit(1)\n"

// reaches says whether the sandbox's pod connects to host:port now.
func (i *instance) reaches(ctx context.Context, host string, port int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	code, _, err := i.cl.RunProcess(ctx, "python3", []string{"-c", enforceProbe, host, fmt.Sprint(port)}, nil, "")
	if err != nil {
		return false, err
	}
	return code == 0, nil
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
	for {
		code, _, err := i.cl.RunProcess(ctx, "python3", []string{"-c", enforceProbe, hostIP, fmt.Sprint(kubeletPort)}, nil, "")
		switch {
		case err == nil && code != 0:
			return nil
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
