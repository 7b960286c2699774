//go:build linux

package sandboxes_test

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// testInternet starts the test's own internet (internal/testnet) and points
// the sandboxes' resolver at its zone.
func testInternet(t *testing.T) *testnet.Net {
	t.Helper()
	if testing.Short() {
		t.Skip("creates sandboxes and network namespaces")
	}
	sandboxestest.Require(t, os.Geteuid() == 0, "root, to build the test internet (network namespaces, veth)")
	n, err := testnet.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("test internet cleanup: %v", err)
		}
	})
	t.Setenv("CODE_SANDBOXES_DNS", n.DNS)
	return n
}

// netProbe is python that tries network things and prints one line per try:
// "name ok:<reply>" or "name err:<exception class>".
const netProbe = `
import socket, ssl
def _fmt(name, f):
    try:
        r = f()
        print(name, "ok:" + r.strip().replace("\n", "|"))
    except Exception as e:
        print(name, "err:" + type(e).__name__)
def tcp(host, port, send=b"", fam=0):
    def f():
        s = socket.create_connection((host, port), timeout=10) if not fam else socket.socket(fam, socket.SOCK_STREAM)
        if fam:
            s.settimeout(10); s.connect((host, port))
        if send: s.sendall(send)
        out = b""
        while True:
            d = s.recv(4096)
            if not d: break
            out += d
        s.close()
        return out.decode(errors="replace").split("\r\n\r\n")[-1]
    return f
def http(host, port=80, hosthdr=None, fam=0):
    return tcp(host, port, ("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (hosthdr or host)).encode(), fam)
def tls(host, sni, port=443):
    def f():
        ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(socket.create_connection((host, port), timeout=10), server_hostname=sni)
        out = s.recv(100); s.close()
        return out.decode()
    return f
def udp(host, port, fam=socket.AF_INET):
    def f():
        s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(3); s.connect((host, port))
        s.send(b"ping"); d = s.recv(100); s.close()
        return d.decode()
    return f
def resolve(name):
    return lambda: ",".join(sorted(set(a[4][0] for a in socket.getaddrinfo(name, 80, proto=socket.IPPROTO_TCP))))
def unix_abstract(name):
    def f():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(5); s.connect("\0" + name)
        return "connected"
    return f
`

// probe runs the tries in a sandbox and returns name → result.
func probe(t *testing.T, sb *sandboxes.Sandbox, tries string) map[string]string {
	t.Helper()
	ex := runOut(t, sb, netProbe+tries)
	t.Logf("probe:\n%s%s", ex.Stdout(), ex.Stderr())
	if ex.Error != nil {
		t.Fatalf("probe: %v\n%s", ex.Error, ex.Stderr())
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(ex.Stdout()), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			out[k] = v
		}
	}
	return out
}

// hostAddrs are the host's own non-loopback addresses.
func hostAddrs(t *testing.T) []string {
	as, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			out = append(out, n.IP.String())
		}
	}
	return out
}

// hostServer listens on every address of the host (as a careless service
// does) and on an abstract unix socket; it answers "host".
func hostServer(t *testing.T) (port int, abstract string) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	abstract = fmt.Sprintf("csb-net-test-%d", os.Getpid())
	uln, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); uln.Close() })
	for _, l := range []net.Listener{ln, uln} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, _ = c.Read(make([]byte, 4096)) // the request, so the reply isn't lost to a reset
				_, _ = c.Write([]byte("HTTP/1.0 200 OK\r\n\r\nhost\n"))
				c.Close()
			}
		}()
	}
	return ln.Addr().(*net.TCPAddr).Port, abstract
}

func expect(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: no result", k)
		case strings.HasSuffix(w, "*") && strings.HasPrefix(g, strings.TrimSuffix(w, "*")):
		case g != w:
			t.Errorf("%s = %q, want %q", k, g, w)
		}
	}
}

// TestLocalNetworkAll: network all reaches the (test) internet by address
// and by name, over IPv4, IPv6 and UDP, and nothing of the host: not its
// loopback, not any of its addresses, not link-local metadata, not the
// private ranges, not its abstract unix sockets. Refusals are immediate
// (ConnectionRefusedError), not timeouts.
func TestLocalNetworkAll(t *testing.T) {
	testInternet(t)
	port, abstract := hostServer(t)
	sb := newLocal(t, func(c *sandboxes.Config) { c.NetworkPolicy = sandboxes.NetworkAll })
	tries := fmt.Sprintf(`
_fmt("internet", http(%q))
_fmt("byname", http(%q))
_fmt("resolve", resolve(%q))
_fmt("ipv6", http(%q, fam=socket.AF_INET6))
_fmt("udp", udp(%q, 7))
_fmt("tls", tls(%q, "anything"))
_fmt("loopback", http("127.0.0.1", %d))
_fmt("metadata", http(%q))
_fmt("private", http(%q))
_fmt("abstract", unix_abstract(%q))
`, testnet.ServerIPv4, testnet.NameWWW, testnet.NameWWW, testnet.ServerIPv6, testnet.ServerIPv4, testnet.ServerIPv4,
		port, testnet.MetadataIPv4, testnet.PrivateIPv4, abstract)
	want := map[string]string{
		"internet": "ok:internet " + testnet.ServerIPv4,
		"byname":   "ok:internet " + testnet.NameWWW,
		"resolve":  "ok:" + testnet.ServerIPv4 + "," + testnet.ServerIPv6,
		"ipv6":     "ok:internet " + testnet.ServerIPv6,
		"udp":      "ok:ping",
		"tls":      "ok:internet-tls",
		"loopback": "err:ConnectionRefusedError",
		"metadata": "err:ConnectionRefusedError",
		"private":  "err:ConnectionRefusedError",
		"abstract": "err:ConnectionRefusedError",
	}
	for i, a := range hostAddrs(t) {
		k := fmt.Sprintf("hostaddr%d", i)
		fam := "socket.AF_INET"
		if strings.Contains(a, ":") {
			fam = "socket.AF_INET6"
		}
		tries += fmt.Sprintf("_fmt(%q, http(%q, %d, fam=%s))\n", k, a, port, fam)
		want[k] = "err:ConnectionRefusedError"
	}
	expect(t, probe(t, sb, tries), want)
}
