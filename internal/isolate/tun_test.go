//go:build linux

package isolate

import (
	"net"
	"testing"
	"time"
)

// TestNetworkTUN: the sandbox's traffic goes to its tun0 and nowhere else:
// a connect to an outside address arrives as a SYN on Process.TUN, from the
// sandbox's address (nothing is behind the fd here, so no packet goes
// anywhere), and the host's loopback listener is not reachable.
func TestNetworkTUN(t *testing.T) {
	requireRoot(t) // an unprivileged caller's init opens /dev/net/tun itself, which is 0600 on some hosts
	p, out := startSandbox(t, Spec{Network: NetworkTUN}, "dial", "HOST_ADDR=198.51.100.99:80")
	if p.TUN == nil {
		t.Fatal("no TUN fd with NetworkTUN")
	}
	defer p.TUN.Close()
	_ = p.TUN.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, TUNMTU)
	var src, dst net.IP
	for {
		n, err := p.TUN.Read(buf)
		if err != nil {
			t.Fatalf("no packet on the TUN fd: %v", err)
		}
		if n >= 20 && buf[0]>>4 == 4 && buf[9] == 6 { // IPv4, TCP
			src, dst = net.IP(buf[12:16]), net.IP(buf[16:20])
			break
		}
	}
	if src.String() != TUNSandboxIPv4 || dst.String() != "198.51.100.99" {
		t.Errorf("SYN from %s to %s, want from %s to 198.51.100.99", src, dst, TUNSandboxIPv4)
	}
	line, _ := out.ReadString('\n')
	if info, _ := p.Wait(); info.ExitCode == 0 {
		t.Errorf("the dial succeeded with nothing behind tun0: %q", line)
	}

	q, qout := startSandbox(t, Spec{Network: NetworkTUN}, "dial", "HOST_ADDR="+hostListener(t))
	defer q.TUN.Close()
	line, _ = qout.ReadString('\n')
	if info, _ := q.Wait(); info.ExitCode == 0 {
		t.Errorf("the host's loopback listener was reachable: %q", line)
	}
}
