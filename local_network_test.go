//go:build linux

package sandboxes_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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
        if send:
            s.sendall(send); s.shutdown(socket.SHUT_WR)
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

func hostAddrs(t *testing.T) []string {
	as, err := testnet.HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	return as
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
	checkNetworkAll(t, newLocal(t, func(c *sandboxes.Config) { c.NetworkPolicy = sandboxes.NetworkAll }))
}

func checkNetworkAll(t *testing.T, sb *sandboxes.Sandbox) {
	port, abstract := hostServer(t)
	tries := fmt.Sprintf(`
_fmt("internet", http(%q))
_fmt("byname", http(%q))
_fmt("resolve", resolve(%q))
_fmt("ipv6", http(%q, fam=socket.AF_INET6))
_fmt("udp", udp(%q, 7))
_fmt("tls", tls(%q, "anything"))
_fmt("loopback", http("127.0.0.1", %d))
_fmt("anyip", http(%q, %d))
_fmt("metadata", http(%q))
_fmt("private", http(%q))
_fmt("abstract", unix_abstract(%q))
`, testnet.ServerIPv4, testnet.NameWWW, testnet.NameWWW, testnet.ServerIPv6, testnet.ServerIPv4, testnet.ServerIPv4,
		port, testnet.AnyIPv4, port, testnet.MetadataIPv4, testnet.PrivateIPv4, abstract)
	want := map[string]string{
		"internet": "ok:internet " + testnet.ServerIPv4,
		"byname":   "ok:internet " + testnet.NameWWW,
		"resolve":  "ok:" + testnet.ServerIPv4 + "," + testnet.ServerIPv6,
		"ipv6":     "ok:internet " + testnet.ServerIPv6,
		"udp":      "ok:ping",
		"tls":      "ok:internet-tls",
		"loopback": "err:ConnectionRefusedError",
		"anyip":    "err:ConnectionRefusedError", // the host's by a local route, on no interface
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

// TestLocalNetworkAllowPrivate: AllowPrivate opens the private ranges and
// nothing else of what network all refuses.
func TestLocalNetworkAllowPrivate(t *testing.T) {
	testInternet(t)
	sb := newLocal(t, func(c *sandboxes.Config) { c.NetworkPolicy = sandboxes.NetworkAll; c.AllowPrivate = true })
	expect(t, probe(t, sb, fmt.Sprintf(`
_fmt("private", http(%q))
_fmt("metadata", http(%q))
_fmt("hostside", http(%q))
`, testnet.PrivateIPv4, testnet.MetadataIPv4, testnet.HostSideIPv4)), map[string]string{
		"private":  "ok:private " + testnet.PrivateIPv4,
		"metadata": "err:ConnectionRefusedError",
		"hostside": "err:ConnectionRefusedError",
	})
}

// TestLocalNetworkHostForward: Host() reaches a port inside the sandbox's
// own namespace, never the host's loopback port of the same number.
func TestLocalNetworkHostForward(t *testing.T) {
	testInternet(t)
	port, _ := hostServer(t) // listens on the host's loopback too
	sb := newLocal(t, func(c *sandboxes.Config) { c.NetworkPolicy = sandboxes.NetworkAll })
	addr, err := sb.Host(ctxT(t), port)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		b, _ := io.ReadAll(c)
		c.Close()
		if strings.Contains(string(b), "host") {
			t.Fatalf("Host(%d) reached the host's own port: %q", port, b)
		}
	}
}

// TestLocalNetworkAllowlist: only listed names connect, and every bypass
// fails: connecting by an address no allowed name resolved to, a name not
// listed, a Host header or TLS SNI other than the name resolved, a
// non-HTTP/TLS protocol to a named host, UDP, DNS to an outside resolver
// (UDP and TCP), and a listed name whose answer rebinds to loopback. A
// listed CIDR is reachable with any protocol, private or not.
func TestLocalNetworkAllowlist(t *testing.T) {
	n := testInternet(t)
	checkNetworkAllowlist(t, n, newLocal(t, allowlistConfig))
}

func allowlistConfig(c *sandboxes.Config) {
	c.NetworkPolicy = sandboxes.NetworkAllowlist
	c.AllowedHosts = []string{testnet.NameWWW, "*." + testnet.Zone + "x", testnet.NameRebind, testnet.PrivateIPv4 + "/32"}
}

func checkNetworkAllowlist(t *testing.T, n *testnet.Net, sb *sandboxes.Sandbox) {
	// Before any lookup nothing is pinned: the server's address is refused.
	before := probe(t, sb, fmt.Sprintf(`_fmt("byip", http(%q, hosthdr=%q))`, testnet.ServerIPv4, testnet.NameWWW))
	expect(t, before, map[string]string{"byip": "err:ConnectionRefusedError"})

	hits := func(port string) int {
		return n.Hits(net.JoinHostPort(testnet.ServerIPv4, port)) + n.Hits(net.JoinHostPort(testnet.ServerIPv6, port))
	}
	h80, h443, h7, h53 := hits("80"), hits("443"), hits("7"), hits("53")
	got := probe(t, sb, fmt.Sprintf(`
_fmt("resolve", resolve(%[1]q))
_fmt("byname", http(%[1]q))
_fmt("ipv6", http(%[5]q, hosthdr=%[1]q, fam=socket.AF_INET6))
_fmt("tls", tls(%[2]q, %[1]q))
_fmt("hostmismatch", http(%[2]q, hosthdr=%[3]q))
_fmt("snimismatch", tls(%[2]q, %[3]q))
_fmt("nosni", tls(%[2]q, None))
_fmt("rawtcp", tcp(%[2]q, 7, b"hello\n"))
_fmt("notlisted", resolve(%[3]q))
_fmt("metaname", resolve(%[4]q))
_fmt("rebind", resolve(%[6]q))
_fmt("udp", udp(%[2]q, 7))
_fmt("dnstcp", tcp(%[2]q, 53, b"\x00\x1d\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05other\x04test\x00\x00\x01\x00\x01"))
_fmt("dnsudp", udp(%[2]q, 53))
_fmt("cidr", tcp(%[7]q, 7, b"hello\n"))
_fmt("metadata", http(%[8]q))
`, testnet.NameWWW, testnet.ServerIPv4, testnet.NameOther, testnet.NameMeta, testnet.ServerIPv6, testnet.NameRebind,
		testnet.PrivateIPv4, testnet.MetadataIPv4))
	expect(t, got, map[string]string{
		"resolve":      "ok:" + testnet.ServerIPv4 + "," + testnet.ServerIPv6,
		"byname":       "ok:internet " + testnet.NameWWW,
		"ipv6":         "ok:internet " + testnet.NameWWW,
		"tls":          "ok:internet-tls",
		"hostmismatch": "err:*",
		"snimismatch":  "err:*",
		"nosni":        "err:*",
		"rawtcp":       "err:*",
		"notlisted":    "err:gaierror",
		"metaname":     "err:gaierror",
		"rebind":       "err:gaierror",
		"udp":          "err:ConnectionRefusedError",
		"dnstcp":       "err:*",
		"dnsudp":       "err:ConnectionRefusedError",
		"cidr":         "ok:hello",
		"metadata":     "err:ConnectionRefusedError",
	})
	// The mismatches never reached the server: the two allowed HTTP
	// requests and the one allowed TLS connection are all it saw.
	for _, c := range []struct {
		port      string
		was, want int
	}{{"80", h80, 2}, {"443", h443, 1}, {"7", h7, 0}, {"53", h53, 0}} {
		if got := hits(c.port) - c.was; got != c.want {
			t.Errorf("the server's :%s accepted %d connections from the sandbox, want %d", c.port, got, c.want)
		}
	}
}

// TestLocalNetworkUpdate: UpdateNetwork switches a running sandbox between
// all and allowlist, and refuses what it can't do.
func TestLocalNetworkUpdate(t *testing.T) {
	testInternet(t)
	checkNetworkUpdate(t, newLocal(t, func(c *sandboxes.Config) { c.NetworkPolicy = sandboxes.NetworkAll }), newLocal(t, nil))
}

func checkNetworkUpdate(t *testing.T, sb, none *sandboxes.Sandbox) {
	try := fmt.Sprintf(`_fmt("byip", http(%q))`, testnet.ServerIPv4)
	expect(t, probe(t, sb, try), map[string]string{"byip": "ok:internet " + testnet.ServerIPv4})
	if err := sb.UpdateNetwork(ctxT(t), sandboxes.Network{Policy: sandboxes.NetworkAllowlist, AllowedHosts: []string{testnet.NameWWW}}); err != nil {
		t.Fatal(err)
	}
	expect(t, probe(t, sb, try), map[string]string{"byip": "err:ConnectionRefusedError"})
	if err := sb.UpdateNetwork(ctxT(t), sandboxes.Network{Policy: sandboxes.NetworkAll}); err != nil {
		t.Fatal(err)
	}
	expect(t, probe(t, sb, try), map[string]string{"byip": "ok:internet " + testnet.ServerIPv4})
	if err := sb.UpdateNetwork(ctxT(t), sandboxes.Network{Policy: sandboxes.NetworkNone}); !errors.Is(err, sandboxes.ErrNotSupported) {
		t.Errorf("all → none = %v, want ErrNotSupported", err)
	}
	if err := sb.UpdateNetwork(ctxT(t), sandboxes.Network{Policy: sandboxes.NetworkAllowlist, AllowedHosts: []string{"127.0.0.1"}}); !errors.Is(err, sandboxes.ErrInvalidConfig) {
		t.Errorf("allowlist of loopback = %v, want ErrInvalidConfig", err)
	}
	if err := none.UpdateNetwork(ctxT(t), sandboxes.Network{Policy: sandboxes.NetworkAll}); !errors.Is(err, sandboxes.ErrNotSupported) {
		t.Errorf("none → all = %v, want ErrNotSupported", err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestLocalNetworkUpdateRightAfterCreate: an update sent the moment Create
// returns is applied. The supervisor used to start listening for its
// signal only after reporting the sandbox up, and Go drops a SIGUSR1 that
// nobody listens for: the update then waited 10 s and failed
// (TestAgainstOurServer, through serve, in CI).
func TestLocalNetworkUpdateRightAfterCreate(t *testing.T) {
	for i := range 8 {
		sb := newLocal(t, func(c *sandboxes.Config) {
			c.NetworkPolicy, c.AllowedHosts = sandboxes.NetworkAllowlist, []string{"pypi.org"}
		})
		if err := sb.UpdateNetwork(ctxT(t), sandboxes.Network{Policy: sandboxes.NetworkAll}); err != nil {
			t.Fatalf("update %d right after Create: %v", i, err)
		}
		sb.Close()
	}
}
