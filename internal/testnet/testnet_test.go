//go:build linux

package testnet

import (
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// TestStartClose: the test internet answers from the host, and Close
// leaves no namespace or interface behind.
func TestStartClose(t *testing.T) {
	testdep.Require(t, os.Geteuid() == 0, "root (the test internet is a network namespace of its own)")
	n, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ServerIPv4, "80"), 5*time.Second)
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	b, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasSuffix(string(b), "internet x\n") {
		t.Errorf("reply %q", b)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + n.NS); err == nil {
		t.Errorf("namespace %s left behind", n.NS)
	}
	if _, err := net.InterfaceByName(n.veth); err == nil {
		t.Errorf("interface %s left behind", n.veth)
	}
}

// A test internet whose owner died (no Close) does not break the next
// Start: its namespace, veth and routes go first.
func TestStartAfterACrash(t *testing.T) {
	testdep.Require(t, os.Geteuid() == 0, "root (the test internet is a network namespace of its own)")
	n, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	// As if the process had died: the lock goes (the kernel drops it), the
	// namespace and routes stay.
	n.lock.Close()
	n.lock = nil
	n2, err := Start()
	if err != nil {
		t.Fatalf("Start after a crashed owner: %v", err)
	}
	if err := n2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + n.NS); err == nil {
		t.Errorf("the dead owner's namespace %s is still there", n.NS)
	}
	_ = n.Close() // its servers (goroutines of this process); nothing else is left
}
