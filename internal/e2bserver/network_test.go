//go:build linux

package e2bserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// E2B's network options (issue #12): allowOut/denyOut with E2B's
// precedence, updateNetwork on a running sandbox, maskRequestHost, and the
// refusals of what the server can't honour. Against the test's own internet
// (internal/testnet): no packet leaves the machine.

// testInternet starts the test internet and points the sandboxes' resolver
// at its zone.
func testInternet(t *testing.T) *testnet.Net {
	t.Helper()
	if testing.Short() {
		t.Skip("creates sandboxes and network namespaces")
	}
	needSandboxes(t)
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

// probeCode tries network things and prints "name ok:<reply>" or
// "name err:<exception class>" per try.
const probeCode = `
import socket, ssl
def _fmt(name, f):
    try:
        print(name, "ok:" + f().strip().replace("\n", "|"))
    except Exception as e:
        print(name, "err:" + type(e).__name__)
def http(host, hosthdr=None, fam=0):
    def f():
        s = socket.create_connection((host, 80), timeout=10) if not fam else socket.socket(fam, socket.SOCK_STREAM)
        if fam:
            s.settimeout(10); s.connect((host, 80))
        s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (hosthdr or host)).encode())
        out = b""
        while True:
            d = s.recv(4096)
            if not d: break
            out += d
        s.close()
        return out.decode(errors="replace").split("\r\n\r\n")[-1]
    return f
def tls(host, sni):
    def f():
        ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(socket.create_connection((host, 443), timeout=10), server_hostname=sni)
        out = s.recv(100); s.close()
        return out.decode()
    return f
def resolve(name):
    return lambda: ",".join(sorted(set(a[4][0] for a in socket.getaddrinfo(name, 80, proto=socket.IPPROTO_TCP))))
`

// netProbe runs tries in sb through the server and returns name → result.
func netProbe(t *testing.T, base string, sb sandboxJSON, tries string) map[string]string {
	t.Helper()
	raw := execute(t, base, sb, probeCode+tries)
	var stdout strings.Builder
	sc := bufio.NewScanner(strings.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m struct{ Type, Text string }
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Type == "stdout" {
			stdout.WriteString(m.Text)
		}
	}
	t.Logf("probe:\n%s", stdout.String())
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			out[k] = v
		}
	}
	return out
}

func expectProbe(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: %s: no result", what, k)
		case strings.HasSuffix(w, "*") && strings.HasPrefix(g, strings.TrimSuffix(w, "*")):
		case g != w:
			t.Errorf("%s: %s = %q, want %q", what, k, g, w)
		}
	}
}

// putNetwork is the SDK's updateNetwork: PUT /sandboxes/{id}/network.
func putNetwork(t *testing.T, base, key, id, body string) (int, apiError) {
	t.Helper()
	var e apiError
	resp := call(t, "PUT", base+"/sandboxes/"+id+"/network", key, body, nil, nil)
	if resp.StatusCode != http.StatusNoContent {
		resp = call(t, "PUT", base+"/sandboxes/"+id+"/network", key, body, nil, &e)
	}
	return resp.StatusCode, e
}

// TestNetworkOptionsRefused: what the server can't honour is refused with
// E2B's error shape and the reason, before any sandbox exists.
func TestNetworkOptionsRefused(t *testing.T) {
	_, base := testServer(t, Options{})
	for _, c := range []struct{ body, want string }{
		{`{"templateID":"base","network":{"denyOut":["example.com"]}}`, "domains are not supported in denyOut"},
		{`{"templateID":"base","network":{"denyOut":["*.example.com"]}}`, "domains are not supported in denyOut"},
		{`{"templateID":"base","network":{"denyOut":["1.2.3.4:80"]}}`, "ports"},
		{`{"templateID":"base","network":{"allowOut":["example.com:443"],"denyOut":["0.0.0.0/0"]}}`, "ports"},
		{`{"templateID":"base","network":{"allowOut":["10.0.0.0/8"],"denyOut":["0.0.0.0/0"]}}`, "private range"},
		{`{"templateID":"base","network":{"allowOut":["192.168.1.1"],"denyOut":["0.0.0.0/0"]}}`, "private range"},
		{`{"templateID":"base","network":{"allowOut":["fd00::1"],"denyOut":["0.0.0.0/0"]}}`, "private range"},
		{`{"templateID":"base","network":{"egressProxy":{"address":"proxy.example.com:1080"}}}`, "egressProxy"},
		{`{"templateID":"base","network":{"httpsPorts":[3000]}}`, "httpsPorts"},
		{`{"templateID":"base","network":{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],"rules":{"api.example.com":[{"transform":{"headers":{"Authorization":"Bearer s3cret"}}}]}}}`, "rules"},
		{`{"templateID":"base","network":{"maskRequestHost":"evil\r\nX-Injected: 1"}}`, "maskRequestHost"},
		{`{"templateID":"base","network":{"maskRequestHost":"a b"}}`, "maskRequestHost"},
		{`{"templateID":"base","iam":{"tokens":{"aws":{"audience":"sts.amazonaws.com","tokenType":"JWT-SVID"}}}}`, "iam"},
		{`{"templateID":"base","network":{"denyOut":` + manyEntries(maxNetworkEntries+1) + `}}`, "at most"},
	} {
		wantError(t, "POST", base+"/sandboxes", testKey, c.body, 400, c.want)
	}
}

func manyEntries(n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"203.0.%d.%d"`, i/256, i%256)
	}
	b.WriteString("]")
	return b.String()
}

// TestNetworkAllowDenyUpdate: denyOut with allowOut exceptions (allowOut
// wins, names only with their own SNI/Host), updateNetwork on the running
// sandbox (in force when it answers), and the attacks on it.
func TestNetworkAllowDenyUpdate(t *testing.T) {
	testInternet(t)
	checkAllowDenyUpdate(t, Options{})
}

// TestNetworkAllowDenyUpdateDocker: the same on serve --variant docker.
func TestNetworkAllowDenyUpdateDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("creates containers and network namespaces")
	}
	needDocker(t)
	testInternet(t)
	checkAllowDenyUpdate(t, Options{Config: sandboxes.Config{Variant: "docker", EnvironmentDir: os.Getenv("CODE_SANDBOXES_TEST_ENV_DIR")}})
}

func checkAllowDenyUpdate(t *testing.T, o Options) {
	o.Keys = []Key{{Key: keyA, Team: "team-a"}, {Key: keyB, Team: "team-b"}}
	_, base := testServer(t, o)
	www, other := testnet.NameWWW, testnet.NameOther
	ip4, ip6 := testnet.ServerIPv4, testnet.ServerIPv6
	sb := createSB(t, base, keyA, fmt.Sprintf(`{"templateID":"base","timeout":300,"network":{"denyOut":[%q],"allowOut":[%q],"maskRequestHost":"${PORT}-masked.example"}}`, ip4, www))

	tries := fmt.Sprintf(`
_fmt("byip", http(%[2]q))
_fmt("resolve", resolve(%[1]q))
_fmt("byname", http(%[1]q))
_fmt("tls", tls(%[2]q, %[1]q))
_fmt("hostgame", http(%[2]q, hosthdr=%[3]q))
_fmt("snigame", tls(%[2]q, %[3]q))
_fmt("ipv6", http(%[4]q, fam=socket.AF_INET6))
`, www, ip4, other, ip6)
	// denyOut 198.51.100.10, allowOut www (which resolves there): the name
	// reaches it, the bare IP and a neighbour's Host/SNI don't; IPv6 isn't
	// denied.
	expectProbe(t, "deny ip, allow name", netProbe(t, base, sb, tries), map[string]string{
		"byip": "err:*", "resolve": "ok:" + ip4 + "," + ip6, "byname": "ok:internet " + www, "tls": "ok:internet-tls",
		"hostgame": "err:*", "snigame": "err:*", "ipv6": "ok:internet " + ip6,
	})
	var d sandboxDetail
	call(t, "GET", base+"/sandboxes/"+sb.SandboxID, keyA, "", nil, &d)
	if d.Network == nil || !d.AllowInternetAccess || strings.Join(d.Network.DenyOut, ",") != ip4 || strings.Join(d.Network.AllowOut, ",") != www || d.Network.MaskRequestHost != "${PORT}-masked.example" {
		t.Errorf("GET network: internet %v, %+v", d.AllowInternetAccess, d.Network)
	}

	// maskRequestHost: the user's server sees the mask as Host.
	execute(t, base, sb, echoServer)
	if st, h := tunnel(t, base, sb, 8000, nil); st != 200 || h["host"] != "8000-masked.example" {
		t.Errorf("tunnel with maskRequestHost: %d, Host %q", st, h["host"])
	}

	// Attacks on updateNetwork: another team's sandbox is not found (as a
	// missing one), and no body widens past what the server allows.
	st, theirs := putNetwork(t, base, keyB, sb.SandboxID, `{}`)
	st2, none := putNetwork(t, base, keyB, "lzzzzzzzzzzzzzzzz", `{}`)
	if st != 404 || st2 != 404 || strings.ReplaceAll(theirs.Message, sb.SandboxID, "X") != strings.ReplaceAll(none.Message, "lzzzzzzzzzzzzzzzz", "X") {
		t.Errorf("updateNetwork by another team: %d %q; missing: %d %q", st, theirs.Message, st2, none.Message)
	}
	for _, c := range []struct{ body, want string }{
		{`{"denyOut":["0.0.0.0/0"],"allowOut":["127.0.0.1"]}`, "loopback"},
		{`{"denyOut":["0.0.0.0/0"],"allowOut":["169.254.169.254"]}`, "link-local"},
		{`{"denyOut":["0.0.0.0/0"],"allowOut":["0.0.0.0/0"]}`, "0.0.0.0/0"},
		{`{"denyOut":["0.0.0.0/0"],"allowOut":["10.77.0.10"]}`, "private range"},
		{`{"denyOut":["0.0.0.0/0"],"allowOut":["*"]}`, "not a host name"},
		{`{"denyOut":["www.example.com"]}`, "domains are not supported in denyOut"},
		{`{"allowOut":["x"],"rules":{"x":[{"transform":{"headers":{"Authorization":"s"}}}]}}`, "rules"},
		{`{"egressProxy":{"address":"p:1080"}}`, "egressProxy"},
		{`{"allowOut":"1.2.3.4"}`, "invalid JSON"},
	} {
		if st, e := putNetwork(t, base, keyA, sb.SandboxID, c.body); st != 400 || e.Code != 400 || !strings.Contains(e.Message, c.want) {
			t.Errorf("PUT network %s: %d %q, want 400 mentioning %q", c.body, st, e.Message, c.want)
		}
	}
	// The refused updates changed nothing.
	expectProbe(t, "after refused updates", netProbe(t, base, sb, fmt.Sprintf(`_fmt("byip", http(%q))`, ip4)), map[string]string{"byip": "err:*"})

	// Everything denied but the server's IP: by IP it connects, IPv6 and
	// names no longer (denying 0.0.0.0/0 denies all traffic).
	if st, e := putNetwork(t, base, keyA, sb.SandboxID, fmt.Sprintf(`{"denyOut":["0.0.0.0/0"],"allowOut":[%q]}`, ip4)); st != 204 {
		t.Fatalf("PUT network: %d %q", st, e.Message)
	}
	expectProbe(t, "deny all, allow ip", netProbe(t, base, sb, tries), map[string]string{
		"byip": "ok:internet " + ip4, "resolve": "err:gaierror", "ipv6": "err:*",
	})
	// allow_internet_access false: nothing.
	if st, e := putNetwork(t, base, keyA, sb.SandboxID, `{"allow_internet_access":false}`); st != 204 {
		t.Fatalf("PUT network: %d %q", st, e.Message)
	}
	expectProbe(t, "no internet", netProbe(t, base, sb, tries), map[string]string{"byip": "err:*", "resolve": "err:gaierror", "ipv6": "err:*"})
	call(t, "GET", base+"/sandboxes/"+sb.SandboxID, keyA, "", nil, &d)
	if d.AllowInternetAccess {
		t.Error("GET after allow_internet_access false: allowInternetAccess true")
	}
	// An empty update clears every rule: all of it again.
	if st, e := putNetwork(t, base, keyA, sb.SandboxID, `{}`); st != 204 {
		t.Fatalf("PUT network: %d %q", st, e.Message)
	}
	expectProbe(t, "cleared", netProbe(t, base, sb, tries), map[string]string{
		"byip": "ok:internet " + ip4, "byname": "ok:internet " + www, "hostgame": "ok:internet " + other, "ipv6": "ok:internet " + ip6,
	})

	// A sandbox created without internet access has no interface to open:
	// refused with the way to get one that can be.
	off := createSB(t, base, keyA, `{"templateID":"base","timeout":120,"allow_internet_access":false}`)
	if st, e := putNetwork(t, base, keyA, off.SandboxID, `{}`); st != 400 || !strings.Contains(e.Message, "denyOut") {
		t.Errorf("PUT network on a sandbox without network: %d %q", st, e.Message)
	}
}

// TestNetworkAllowPrivate: private ranges stay out of reach unless the
// operator opens them (serve --allow-private); then allowOut may list them.
func TestNetworkAllowPrivate(t *testing.T) {
	testInternet(t)
	priv := testnet.PrivateIPv4
	_, closed := testServer(t, Options{})
	a := createSB(t, closed, testKey, `{"templateID":"base","timeout":120,"allow_internet_access":true}`)
	expectProbe(t, "default", netProbe(t, closed, a, fmt.Sprintf(`_fmt("priv", http(%q))`, priv)), map[string]string{"priv": "err:*"})

	_, open := testServer(t, Options{AllowPrivate: true})
	b := createSB(t, open, testKey, fmt.Sprintf(`{"templateID":"base","timeout":120,"network":{"denyOut":["0.0.0.0/0"],"allowOut":[%q]}}`, priv))
	expectProbe(t, "--allow-private", netProbe(t, open, b, fmt.Sprintf(`_fmt("priv", http(%q))
_fmt("server", http(%q))`, priv, testnet.ServerIPv4)), map[string]string{"priv": "ok:private " + priv, "server": "err:*"})
}

// TestOfficialJSSDKNetwork: the official SDK's network options against
// serve (e2e/e2bjs/network.test.mjs): allowOut/denyOut, getInfo,
// updateNetwork, and E2B's errors for what is refused.
func TestOfficialJSSDKNetwork(t *testing.T) {
	testInternet(t)
	node, npm := needNode(t)
	npmCI(t, npm)
	_, url := testServer(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep := runNodeScript(ctx, t, node, "network.test.mjs", url,
		"TESTNET_IP="+testnet.ServerIPv4, "TESTNET_NAME="+testnet.NameWWW, "TESTNET_OTHER="+testnet.NameOther)
	step := func(name string, v any) {
		t.Helper()
		raw, ok := rep.Steps[name]
		if !ok {
			t.Fatalf("step %s missing", name)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("step %s: %v: %s", name, err, raw)
		}
	}
	type gets struct{ ByName, ByIP, HostGame, Thrown, Message string }
	ok := func(host string) string { return "internet " + host }
	for _, c := range []struct {
		step string
		want gets
	}{
		{"allowName", gets{ByName: ok(testnet.NameWWW), ByIP: "err:*", HostGame: "err:*"}},
		{"updateToIP", gets{ByIP: ok(testnet.ServerIPv4), HostGame: ok(testnet.NameOther)}},
		// The name's IPv6 address is not denied: it still connects.
		{"updateDenyIP", gets{ByIP: "err:*", ByName: ok(testnet.NameWWW)}},
		{"updateCleared", gets{ByIP: ok(testnet.ServerIPv4), HostGame: ok(testnet.NameOther)}},
		{"updateNoInternet", gets{ByIP: "err:*"}},
	} {
		var g gets
		step(c.step, &g)
		if g.Thrown != "" {
			t.Errorf("%s threw %s: %s", c.step, g.Thrown, g.Message)
			continue
		}
		for _, f := range []struct{ name, got, want string }{
			{"byName", g.ByName, c.want.ByName}, {"byIP", g.ByIP, c.want.ByIP}, {"hostGame", g.HostGame, c.want.HostGame},
		} {
			switch {
			case f.want == "":
			case strings.HasSuffix(f.want, "*") && strings.HasPrefix(f.got, strings.TrimSuffix(f.want, "*")):
			case f.got != f.want:
				t.Errorf("%s: %s = %q, want %q", c.step, f.name, f.got, f.want)
			}
		}
	}
	var info struct {
		AllowInternetAccess *bool
		Network             *struct{ AllowOut, DenyOut []string }
	}
	step("info", &info)
	if info.AllowInternetAccess == nil || *info.AllowInternetAccess || info.Network == nil ||
		strings.Join(info.Network.AllowOut, ",") != testnet.NameWWW || strings.Join(info.Network.DenyOut, ",") != "0.0.0.0/0" {
		t.Errorf("getInfo: %+v %+v", info.AllowInternetAccess, info.Network)
	}
	// E2B's 400 reaches the SDK's caller as its SandboxError with the
	// server's reason.
	for name, want := range map[string][2]string{
		"updateMissing": {"SandboxNotFoundError", "not found"},
		"denyDomain":    {"SandboxError", "400: domains are not supported in denyOut"},
		"rules":         {"SandboxError", "400: network.rules"},
	} {
		var g gets
		step(name, &g)
		if g.Thrown != want[0] || !strings.Contains(g.Message, want[1]) {
			t.Errorf("%s: threw %q (%s), want %s mentioning %q", name, g.Thrown, g.Message, want[0], want[1])
		}
	}
}
