package hostile

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
)

// netAttacks is python trying to reach what a networked sandbox must not:
// one line per try, "name REACHED <reply>" or "name blocked <exception>".
const netAttacks = `import socket, ssl
def go(name, host, port, send=b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", fam=0, sni=None):
    try:
        if fam:
            s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(10); s.connect((host, port))
        else:
            s = socket.create_connection((host, port), timeout=10)
        if sni is not None:
            ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
            s = ctx.wrap_socket(s, server_hostname=sni)
        elif send:
            s.sendall(send)
        d = s.recv(200)
        print(name, ("REACHED " + d.decode(errors="replace").split("\r\n")[-1].strip()) if d else "blocked closed")
    except Exception as e:
        print(name, "blocked", type(e).__name__)
def res(name, host):
    try:
        print(name, "REACHED", socket.getaddrinfo(host, 80)[0][4][0])
    except Exception as e:
        print(name, "blocked", type(e).__name__)
def udp(name, host, port, payload=b"ping"):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.connect((host, port)); s.send(payload)
        print(name, "REACHED", s.recv(100)[:20])
    except Exception as e:
        print(name, "blocked", type(e).__name__)
def abstract(name, path):
    try:
        s = socket.socket(socket.AF_UNIX); s.settimeout(3); s.connect("\0" + path); print(name, "REACHED")
    except Exception as e:
        print(name, "blocked", type(e).__name__)
`

// netHost is what the host offers a careless sandbox: a service on every
// address, and an abstract unix socket.
func netHost(t *testing.T) (int, string) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("cs-hostile-net-%d", os.Getpid())
	al, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); al.Close() })
	for _, l := range []net.Listener{ln, al} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Read(make([]byte, 1024))
				_, _ = c.Write([]byte("HTTP/1.0 200 OK\r\n\r\nhost-service"))
				c.Close()
			}
		}()
	}
	return ln.Addr().(*net.TCPAddr).Port, name
}

func startTestnet(t *testing.T) *testnet.Net {
	n, err := testnet.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	t.Setenv("CODE_SANDBOXES_DNS", n.DNS)
	return n
}

// countNet checks every line of netAttacks output is "blocked" except
// those in want (which must be "REACHED"), and returns the number blocked.
func countNet(t *testing.T, policy, output string, want ...string) int {
	t.Helper()
	blocked := 0
	for _, l := range strings.Split(output, "\n") {
		name, rest, _ := strings.Cut(l, " ")
		reached := strings.HasPrefix(rest, "REACHED")
		switch {
		case slices.Contains(want, name) && !reached:
			t.Errorf("network %s: %s should have been reached: %s", policy, name, rest)
		case !slices.Contains(want, name) && reached:
			t.Errorf("network %s reached what it must not: %s", policy, l)
		case !reached:
			blocked++
		}
	}
	return blocked
}

// networkAll attacks a network-all sandbox: the test internet must work;
// the host (loopback, each of its addresses, as v4-mapped v6 too, its
// abstract sockets), link-local metadata by address and by a name
// resolving to it, the private ranges, a name rebinding to loopback and the
// stack's own gateway (but its resolver) must not.
func (c *suite) networkAll(t *testing.T) {
	if !slices.Contains(c.o.Networks, sandboxes.NetworkAll) {
		t.Skip("the variant's network all isn't checked here")
	}
	startTestnet(t)
	port, abs := netHost(t)
	sb := create(t, c.cfg, func(cfg *sandboxes.Config) { cfg.NetworkPolicy = sandboxes.NetworkAll })
	code := netAttacks + fmt.Sprintf(`
go("internet", %[1]q, 80)
go("loopback", "127.0.0.1", %[2]d)
go("v4mapped-loopback", "::ffff:127.0.0.1", %[2]d, fam=socket.AF_INET6)
go("zero", "0.0.0.0", %[2]d)
go("metadata", "169.254.169.254", 80)
go("metadata-by-name", %[3]q, 80)
go("private", %[4]q, 80)
go("gateway", "169.254.100.1", 80)
res("rebind", %[5]q)
go("rebind-connect", %[5]q, %[2]d)
abstract("host-abstract", %[6]q)
import os, struct
# The device is configured before the sandbox's code runs, which holds no
# CAP_NET_ADMIN: raw netlink (no ip binary needed) can't take it down,
# readdress it or remove the default route.
def nl(name, mtype, body):
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); s.settimeout(5)
        s.send(struct.pack("=IHHII", 16 + len(body), mtype, 0x1 | 0x4 | 0x400 | 0x200, 1, 0) + body)
        d = s.recv(4096)
        err = struct.unpack("=i", d[16:20])[0]
        print(name, "REACHED" if err == 0 else "blocked errno%%d" %% -err)
    except Exception as e:
        print(name, "blocked", type(e).__name__)
idx = socket.if_nametoindex("tun0")
nl("reconfig-link-down", 16, struct.pack("=BxHiII", 0, 0, idx, 0, 1))
nl("reconfig-addr", 20, struct.pack("=BBBBi", 2, 32, 0, 0, idx) + struct.pack("=HH4s", 8, 2, bytes([10, 9, 9, 9])))
nl("reconfig-route", 25, struct.pack("=BBBBBBBBI", 2, 0, 0, 0, 254, 0, 0, 1, 0))
print("dev-net-tun", "REACHED" if os.path.exists("/dev/net/tun") else "blocked absent")
`, testnet.ServerIPv4, port, testnet.NameMeta, testnet.PrivateIPv4, testnet.NameRebind, abs)
	for i, a := range hostAddrs(t) {
		fam := "socket.AF_INET"
		if strings.Contains(a, ":") {
			fam = "socket.AF_INET6"
		}
		code += fmt.Sprintf("go(\"host-address-%d\", %q, %d, fam=%s)\n", i, a, port, fam)
	}
	output := out(py(t, sb, code))
	t.Logf("attempts:\n%s", output)
	// (rebind resolves, to loopback: the sandbox's own; connecting there
	// reaches nothing of the host.)
	n := countNet(t, "all", output, "internet", "rebind")
	record(t, "network all: the test internet reached; %d/%d attempts at the host (loopback, v4-mapped, 0.0.0.0, each host address, abstract socket), metadata (by address and name), private range, rebinding, the stack's gateway, and at reconfiguring tun0 (down, address, route; no /dev/net/tun) refused", n, strings.Count(output, "\n")-1)
}

// networkAllowlist attacks an allowlist sandbox: only the listed name
// over HTTP/TLS with matching Host/SNI connects.
func (c *suite) networkAllowlist(t *testing.T) {
	if !slices.Contains(c.o.Networks, sandboxes.NetworkAllowlist) {
		t.Skip("the variant's network allowlist isn't checked here")
	}
	startTestnet(t)
	sb := create(t, c.cfg, func(cfg *sandboxes.Config) {
		cfg.NetworkPolicy, cfg.AllowedHosts = sandboxes.NetworkAllowlist, []string{testnet.NameWWW, testnet.NameRebind}
	})
	code := netAttacks + fmt.Sprintf(`
go("by-ip-before-dns", %[2]q, 80)
res("allowed-name", %[1]q)
go("allowed", %[1]q, 80, send=b"GET / HTTP/1.1\r\nHost: %[1]s\r\nConnection: close\r\n\r\n")
go("allowed-tls", %[2]q, 443, sni=%[1]q)
go("host-mismatch", %[2]q, 80, send=b"GET / HTTP/1.1\r\nHost: %[3]s\r\nConnection: close\r\n\r\n")
go("sni-mismatch", %[2]q, 443, sni=%[3]q)
go("no-sni", %[2]q, 443, sni="")
go("raw-tcp-to-named", %[2]q, 7, send=b"hello")
res("unlisted-name", %[3]q)
res("metadata-name", %[4]q)
res("rebind", %[5]q)
go("ipv6-unresolved", %[6]q, 80, fam=socket.AF_INET6)
udp("udp", %[2]q, 7)
udp("dns-outside-udp", %[2]q, 53, b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05other\x00\x00\x01\x00\x01")
go("dns-outside-tcp", %[2]q, 53, send=b"\x00\x17\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05other\x00\x00\x01\x00\x01")
go("metadata", "169.254.169.254", 80)
go("private", %[7]q, 80)
# Keep-alive fronting: an allowed request, then one for another site on the
# same connection (the shared address of a CDN).
try:
    s = socket.create_connection((%[2]q, 80), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\nHost: %[1]s\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.1\r\nHost: %[3]s\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        d = s.recv(4096)
        if not d: break
        got += d
    print("keepalive-fronting", "REACHED" if b"%[3]s" in got else "blocked second request refused")
except Exception as e:
    print("keepalive-fronting", "blocked", type(e).__name__)
`, testnet.NameWWW, testnet.ServerIPv4, testnet.NameOther, testnet.NameMeta, testnet.NameRebind, testnet.ServerIPv6, testnet.PrivateIPv4)
	output := out(py(t, sb, code))
	t.Logf("attempts:\n%s", output)
	n := countNet(t, "allowlist", output, "allowed-name", "allowed", "allowed-tls")
	record(t, "network allowlist: the listed name reached over HTTP and TLS; %d/%d bypasses refused (by IP, Host/SNI mismatch, no SNI, raw TCP, unlisted and metadata names, rebinding, IPv6, UDP, DNS to an outside resolver over UDP and TCP, metadata, private, keep-alive fronting)", n, strings.Count(output, "\n")-2)
}

func hostAddrs(t *testing.T) []string {
	as, err := testnet.HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// allowlistHelperKilled kills the host process that carries an allowlist
// sandbox's traffic (its egress stack: Options.NetworkHelper) and checks
// the sandbox fails closed: no connection at all gets through (not the
// allowed name, not by address, not the private range or metadata), and
// the loss is reported (a policy update answers that the network is
// gone), or the sandbox ends with it, reported dead.
func (c *suite) allowlistHelperKilled(t *testing.T) {
	if !slices.Contains(c.o.Networks, sandboxes.NetworkAllowlist) {
		t.Skip("the variant's network allowlist isn't checked here")
	}
	if c.o.NetworkHelper == nil {
		t.Skip("the variant has no host process carrying a sandbox's traffic")
	}
	startTestnet(t)
	allow := []string{testnet.NameWWW}
	sb := c.create(t, func(cfg *sandboxes.Config) {
		cfg.NetworkPolicy, cfg.AllowedHosts = sandboxes.NetworkAllowlist, allow
	})
	code := netAttacks + fmt.Sprintf(`
go("allowed", %[1]q, 80, send=b"GET / HTTP/1.1\r\nHost: %[1]s\r\nConnection: close\r\n\r\n")
go("by-ip", %[2]q, 80)
go("private", %[3]q, 80)
go("metadata", "169.254.169.254", 80)
udp("udp", %[2]q, 7)
`, testnet.NameWWW, testnet.ServerIPv4, testnet.PrivateIPv4)
	before := out(py(t, sb, code))
	if !strings.Contains(before, "allowed REACHED") {
		t.Fatalf("the allowed name is not reached before the kill (the case proves nothing):\n%s", before)
	}
	pid := c.o.NetworkHelper(t, sb)
	if pid <= 1 {
		t.Fatalf("no network helper found for %s (pid %d)", sb.ID(), pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the network helper (pid %d): %v", pid, err)
	}
	// Bounded: gone (or a zombie) within 10 s.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the network helper (pid %d) outlived SIGKILL by 10 s", pid)
		}
	}
	state := answersOrDead(t, sb, c.o)
	if strings.HasPrefix(state, "dead") {
		record(t, "killing the network helper (pid %d) ended the sandbox, reported: %s", pid, state)
		return
	}
	after := out(py(t, sb, code))
	t.Logf("after the kill:\n%s", after)
	n := countNet(t, "allowlist without its helper", after)
	ctx := ctxT(t, time.Minute)
	err := sb.UpdateNetwork(ctx, sandboxes.Network{Policy: sandboxes.NetworkAllowlist, AllowedHosts: allow})
	if err == nil {
		t.Errorf("a policy update after the helper was killed succeeded: the loss of the network is not reported")
	}
	record(t, "network helper (pid %d) killed: %d/%d connections refused, the allowed name's included (fails closed); the sandbox answers; a policy update reports it: %v", pid, n, strings.Count(after, "\n")+1, firstLine(fmt.Sprint(err)))
}
