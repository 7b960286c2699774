package e2bserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bauth"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// Attack tests for issue #13: each "Why" bullet is a request that must fail.

const (
	keyA = "e2b_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	keyB = "e2b_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	keyC = "e2b_cccccccccccccccccccccccccccccccccccccccc"
)

func createSB(t *testing.T, base, key, body string) sandboxJSON {
	t.Helper()
	var sb sandboxJSON
	resp := call(t, "POST", base+"/sandboxes", key, body, nil, &sb)
	if resp.StatusCode != 201 || sb.SandboxID == "" || sb.EnvdAccessToken == "" || sb.TrafficAccessToken == nil {
		t.Fatalf("create %s: %d %+v", body, resp.StatusCode, sb)
	}
	return sb
}

// execute runs Python in the sandbox through the proxy, with its token.
func execute(t *testing.T, base string, sb sandboxJSON, code string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"code": code})
	req, _ := http.NewRequest("POST", base+"/execute", strings.NewReader(string(b)))
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("execute: %d %s", resp.StatusCode, out)
	}
	return string(out)
}

// echoServer starts, inside sb, an HTTP server on port that answers every
// GET with the request's headers as JSON.
const echoServer = `import subprocess, sys, time, socket
src = '''
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", PORT), H).serve_forever()
'''
subprocess.Popen([sys.executable, "-c", src.replace("PORT", "8000")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
for _ in range(200):
    try:
        socket.create_connection(("127.0.0.1", 8000)).close(); break
    except OSError:
        time.sleep(0.05)
`

func tunnel(t *testing.T, base string, sb sandboxJSON, port int, hdr map[string]string) (int, map[string]string) {
	t.Helper()
	h := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": strconv.Itoa(port)}
	for k, v := range hdr {
		h[k] = v
	}
	var got map[string]string
	req, _ := http.NewRequest("GET", base+"/", nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("tunnel to port %d: %v", port, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = json.Unmarshal(b, &got)
	return resp.StatusCode, got
}

// TestDataPlaneCredentials: no path into a sandbox without its credential,
// and the proxy adds none.
func TestDataPlaneCredentials(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	_, base := testServer(t, Options{})
	a := createSB(t, base, testKey, `{"templateID":"code-interpreter-v1","timeout":120}`)
	b := createSB(t, base, testKey, `{"templateID":"base","timeout":120,"network":{"allowPublicTraffic":false}}`)
	if *a.TrafficAccessToken == *b.TrafficAccessToken || *a.TrafficAccessToken == a.EnvdAccessToken {
		t.Fatalf("traffic tokens: %q %q", *a.TrafficAccessToken, *b.TrafficAccessToken)
	}
	interp := func(sb sandboxJSON, method, path string, hdr map[string]string) int {
		h := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49999"}
		for k, v := range hdr {
			h[k] = v
		}
		body := ""
		if method == "POST" {
			body = `{"language":"python"}`
		}
		return call(t, method, base+path, "", body, h, nil).StatusCode
	}
	// Why: the proxy added the token to any /contexts request.
	for _, c := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"no token", nil, 401},
		{"another sandbox's traffic token", map[string]string{e2bauth.TrafficHeader: *b.TrafficAccessToken}, 401},
		{"another sandbox's envd token", map[string]string{"X-Access-Token": b.EnvdAccessToken}, 401},
		{"its traffic token", map[string]string{e2bauth.TrafficHeader: *a.TrafficAccessToken}, 200},
		{"its envd token", map[string]string{"X-Access-Token": a.EnvdAccessToken}, 200},
	} {
		if st := interp(a, "GET", "/contexts", c.hdr); st != c.want {
			t.Errorf("GET /contexts with %s: %d, want %d", c.name, st, c.want)
		}
		if c.want != 200 {
			if st := interp(a, "POST", "/contexts", c.hdr); st != c.want {
				t.Errorf("POST /contexts with %s: %d, want %d", c.name, st, c.want)
			}
		}
	}
	// The traffic token opens /contexts only, not code execution.
	if st := call(t, "POST", base+"/execute", "", `{"code":"1"}`, map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49999", e2bauth.TrafficHeader: *a.TrafficAccessToken}, nil).StatusCode; st != 401 {
		t.Errorf("/execute with only the traffic token: %d, want 401", st)
	}

	// Why: any port was reachable with no key and no token. A public
	// sandbox's ports stay public (E2B's default); a private one's need its
	// traffic token, and not another's.
	execute(t, base, a, echoServer)
	execute(t, base, b, echoServer)
	if st, _ := tunnel(t, base, a, 8000, nil); st != 200 {
		t.Errorf("public sandbox's port without token: %d", st)
	}
	if st, _ := tunnel(t, base, b, 8000, nil); st != 403 {
		t.Errorf("private sandbox's port without token: %d, want 403", st)
	}
	if st, _ := tunnel(t, base, b, 8000, map[string]string{e2bauth.TrafficHeader: *a.TrafficAccessToken}); st != 403 {
		t.Errorf("private sandbox's port with another sandbox's token: %d, want 403", st)
	}
	if st, _ := tunnel(t, base, b, 8000, map[string]string{"X-Access-Token": b.EnvdAccessToken}); st != 403 {
		t.Errorf("private sandbox's port with the envd token in the wrong header: %d, want 403", st)
	}
	// Why: routing headers went through unchanged. Nothing that addresses
	// or authenticates to the server reaches the sandbox.
	st, seen := tunnel(t, base, b, 8000, map[string]string{e2bauth.TrafficHeader: *b.TrafficAccessToken, "X-API-Key": testKey, "X-Mine": "kept"})
	if st != 200 {
		t.Fatalf("private sandbox's port with its token: %d", st)
	}
	for _, h := range []string{"e2b-sandbox-id", "e2b-sandbox-port", "x-api-key", "e2b-traffic-access-token"} {
		if v, ok := seen[h]; ok {
			t.Errorf("header %s reached the sandbox: %q", h, v)
		}
	}
	if seen["x-mine"] != "kept" {
		t.Errorf("the request's own headers: %v", seen)
	}

	// Signed file URLs, with the sandbox named by header or by the Host
	// route (as the SDKs build them without E2B_SANDBOX_URL); one that
	// names no sandbox is refused (TestSignedURLNamesItsSandbox).
	execute(t, base, a, `open("/home/user/signed.txt", "w").write("secret of a")`)
	sig := func(path, op string, exp int64) url.Values {
		q := url.Values{"path": {path}, "signature": {e2bauth.FileSignature(path, op, "", a.EnvdAccessToken, exp)}}
		if exp != 0 {
			q.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		return q
	}
	get := func(q url.Values, hdr map[string]string) (int, string) {
		return getText(t, base+"/files?"+q.Encode(), hdr)
	}
	routed := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983"}
	hosted := map[string]string{"Host": "49983-" + a.SandboxID + ".localhost"}
	for _, hdr := range []map[string]string{routed, hosted} {
		if st, body := get(sig("/home/user/signed.txt", "read", 0), hdr); st != 200 || body != "secret of a" {
			t.Errorf("signed download (routing %v): %d %q", hdr, st, body)
		}
		if st, body := get(sig("/home/user/signed.txt", "read", time.Now().Add(time.Minute).Unix()), hdr); st != 200 || body != "secret of a" {
			t.Errorf("signed download with expiration (routing %v): %d %q", hdr, st, body)
		}
		if st, _ := get(sig("/home/user/signed.txt", "read", time.Now().Add(-time.Minute).Unix()), hdr); st != 401 {
			t.Errorf("expired signature (routing %v): %d, want 401", hdr, st)
		}
		q := sig("/home/user/other.txt", "read", 0)
		q.Set("path", "/home/user/signed.txt")
		if st, _ := get(q, hdr); st != 401 {
			t.Errorf("signature for another path (routing %v): %d, want 401", hdr, st)
		}
		if st, _ := get(sig("/home/user/signed.txt", "write", 0), hdr); st != 401 {
			t.Errorf("write signature used to read (routing %v): %d, want 401", hdr, st)
		}
	}
	// A's signature does not open b.
	if st, _ := get(sig("/home/user/signed.txt", "read", 0), map[string]string{"E2b-Sandbox-Id": b.SandboxID}); st != 401 {
		t.Errorf("a's signature on b: %d, want 401", st)
	}
}

// TestRequireTrafficToken: with --require-traffic-token every tunnel needs
// the sandbox's own traffic token.
func TestRequireTrafficToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	_, base := testServer(t, Options{RequireTrafficToken: true})
	a := createSB(t, base, testKey, `{"templateID":"base","timeout":120}`)
	execute(t, base, a, echoServer)
	for _, c := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"no token", nil, 403},
		{"a wrong token", map[string]string{e2bauth.TrafficHeader: strings.Repeat("0", 64)}, 403},
		{"the envd token", map[string]string{e2bauth.TrafficHeader: a.EnvdAccessToken}, 403},
		{"its token", map[string]string{e2bauth.TrafficHeader: *a.TrafficAccessToken}, 200},
	} {
		if st, _ := tunnel(t, base, a, 8000, c.hdr); st != c.want {
			t.Errorf("tunnel with %s: %d, want %d", c.name, st, c.want)
		}
		fr := call(t, "GET", base+"/", "", "", mergeHdr(c.hdr, map[string]string{"Host": "8000-" + a.SandboxID + ".localhost"}), nil)
		if fr.StatusCode != c.want {
			t.Errorf("host-form tunnel with %s: %d, want %d", c.name, fr.StatusCode, c.want)
		}
	}
}

func mergeHdr(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestTunnelToServerItselfRefused: a tunnel to the server's own listener
// (from a network-all sandbox, whose loopback may be the host's) used to
// loop until file descriptors ran out.
func TestTunnelToServerItselfRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	s, base := testServer(t, Options{})
	a := createSB(t, base, testKey, `{"templateID":"base","timeout":120,"allow_internet_access":true}`)
	u, _ := url.Parse(base)
	port, _ := strconv.Atoi(u.Port())
	for _, hdr := range []map[string]string{
		nil,
		// A request that itself names a sandbox again, as a loop would.
		{"X-Loop": "1"},
	} {
		st, _ := tunnel(t, base, a, port, hdr)
		// A network-all sandbox has a loopback of its own (issue #12): the
		// tunnel finds nothing on that port there. (The mark, 508, is the
		// second line of defence, for a sandbox that forwards to the host.)
		if st != http.StatusBadGateway {
			t.Errorf("tunnel to the server's own port: %d, want 502", st)
		}
	}
	// Nor does a tunnel reach any other service on the host's loopback.
	hostLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	hostHits := make(chan struct{}, 16)
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			hostHits <- struct{}{}
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
			c.Close()
		}
	}()
	hostPort := hostLn.Addr().(*net.TCPAddr).Port
	if st, _ := tunnel(t, base, a, hostPort, nil); st != http.StatusBadGateway {
		t.Errorf("tunnel to a port of the host's loopback: %d, want 502", st)
	}
	if out := execute(t, base, a, fmt.Sprintf("import socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), timeout=3); print('REACHED')\nexcept OSError as e:\n    print('refused', e)", hostPort)); strings.Contains(out, "REACHED") {
		t.Errorf("a network-all sandbox reached the host's loopback: %s", out)
	}
	select {
	case <-hostHits:
		t.Error("the host's loopback server was reached from the sandbox")
	default:
	}
	// A loop the mark can't see (a program in the sandbox that strips it
	// and calls the server again) runs into the per-sandbox bound.
	e := s.lookup(a.SandboxID, "")
	// The requests above may still be unwinding after their answers.
	for deadline := time.Now().Add(10 * time.Second); e.inflight.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d data-plane requests still open", e.inflight.Load())
		}
	}
	e.inflight.Store(maxInflight)
	if st, _ := tunnel(t, base, a, 8000, nil); st != http.StatusTooManyRequests {
		t.Errorf("request over the in-flight bound: %d, want 429", st)
	}
	e.inflight.Store(0)

	// Spoofing the mark does not help: only this server's own mark counts,
	// and it is secret.
	req, _ := http.NewRequest("GET", base+"/health", nil)
	req.Header.Set(viaHeader, "guess")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 204 {
		t.Errorf("health with a foreign via mark: %v %v", resp, err)
	}
}

// TestTeams: two keys of two teams; B's every call on A's sandbox answers
// exactly as for a sandbox that does not exist.
func TestTeams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	s, base := testServer(t, Options{Keys: []Key{{Key: keyA, Team: "team-a"}, {Key: keyB, Team: "team-b"}}})
	a := createSB(t, base, keyA, `{"templateID":"base","timeout":120}`)
	id := a.SandboxID
	const missing = "lzzzzzzzzzzzzzzzz"
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/sandboxes/%s", ""},
		{"DELETE", "/sandboxes/%s", ""},
		{"POST", "/sandboxes/%s/timeout", `{"timeout":10}`},
		{"POST", "/sandboxes/%s/refreshes", `{"duration":10}`},
		{"POST", "/sandboxes/%s/connect", `{"timeout":10}`},
		{"POST", "/v2/sandboxes/%s/connect", `{"timeout":10}`},
		{"POST", "/sandboxes/%s/resume", `{}`},
		{"POST", "/sandboxes/%s/pause", `{}`},
		{"GET", "/sandboxes/%s/metrics", ""},
	} {
		var theirs, none apiError
		r1 := call(t, c.method, base+strings.ReplaceAll(c.path, "%s", id), keyB, c.body, nil, &theirs)
		r2 := call(t, c.method, base+strings.ReplaceAll(c.path, "%s", missing), keyB, c.body, nil, &none)
		if r1.StatusCode != 404 || r2.StatusCode != 404 || strings.ReplaceAll(theirs.Message, id, "X") != strings.ReplaceAll(none.Message, missing, "X") {
			t.Errorf("%s %s as team B: %d %q; nonexistent: %d %q", c.method, c.path, r1.StatusCode, theirs.Message, r2.StatusCode, none.Message)
		}
	}
	for _, p := range []string{"/sandboxes", "/v2/sandboxes", "/v2/sandboxes?state=running"} {
		var l []listedSandbox
		call(t, "GET", base+p, keyB, "", nil, &l)
		if len(l) != 0 {
			t.Errorf("team B lists %v at %s", idsOf(l), p)
		}
		call(t, "GET", base+p, keyA, "", nil, &l)
		if len(l) != 1 || l[0].SandboxID != id {
			t.Errorf("team A lists %v at %s", idsOf(l), p)
		}
	}
	var d sandboxDetail
	if resp := call(t, "GET", base+"/sandboxes/"+id, keyA, "", nil, &d); resp.StatusCode != 200 || d.EnvdAccessToken != a.EnvdAccessToken {
		t.Errorf("team A's own get: %d", resp.StatusCode)
	}
	// The sandbox survived team B's kill.
	if got := s.Created(); len(got) != 1 {
		t.Errorf("after B's calls the server holds %v", got)
	}
	// Metadata can't claim another team.
	wantError(t, "POST", base+"/sandboxes", keyB, `{"templateID":"base","metadata":{"e2bserver/team":"team-a"}}`, 400, "reserved")

	// A reload that drops team A's key locks A out of its sandbox.
	if err := s.SetKeys([]Key{{Key: keyB, Team: "team-b"}}); err != nil {
		t.Fatal(err)
	}
	wantError(t, "GET", base+"/sandboxes/"+id, keyA, "", 401, "API key")
	if err := s.SetKeys([]Key{{Key: keyA, Team: "team-a"}, {Key: keyB, Team: "team-b"}}); err != nil {
		t.Fatal(err)
	}
	if resp := call(t, "DELETE", base+"/sandboxes/"+id, keyA, "", nil, nil); resp.StatusCode != 204 {
		t.Errorf("team A's kill: %d", resp.StatusCode)
	}
}

// TestQuotas: over quota answers 429 with E2B's error body, and leaves
// nothing behind.
func TestQuotas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	s, base := testServer(t, Options{
		Config: sandboxes.Config{Memory: 256 << 20, CPU: 0.5},
		Keys: []Key{
			{Key: keyA, Team: "team-a", Quota: &Quota{Sandboxes: 1}},
			{Key: keyB, Team: "team-b", Quota: &Quota{TotalMemory: 256 << 20, CreatesPerMinute: 2}},
			{Key: keyC, Team: "team-c", Quota: &Quota{Sandboxes: 1}},
		},
	})
	a := createSB(t, base, keyA, `{"templateID":"base","timeout":120}`)
	wantError(t, "POST", base+"/sandboxes", keyA, `{"templateID":"base","timeout":120}`, 429, "1 sandboxes at once")
	// A key holder hammering a full quota makes the variant list its
	// sandboxes once per relistEvery, not once per request.
	relists := s.relists.Load()
	for range 5 {
		wantError(t, "POST", base+"/sandboxes", keyA, `{"templateID":"base","timeout":120}`, 429, "1 sandboxes at once")
	}
	if n := s.relists.Load(); n != relists {
		t.Errorf("5 refusals within %s re-listed %d more times; want 0", relistEvery, n-relists)
	}
	b := createSB(t, base, keyB, `{"templateID":"base","timeout":120}`)
	wantError(t, "POST", base+"/sandboxes", keyB, `{"templateID":"base","timeout":120}`, 429, "256 MiB of memory")
	// Each sandbox has the server's limits.
	var d sandboxDetail
	call(t, "GET", base+"/sandboxes/"+b.SandboxID, keyB, "", nil, &d)
	if d.MemoryMB != 256 || d.CPUCount != 1 {
		t.Errorf("limits of b: %d MiB, %d CPUs", d.MemoryMB, d.CPUCount)
	}
	// Killing frees the quota; the third create within the minute is over
	// the rate.
	if resp := call(t, "DELETE", base+"/sandboxes/"+b.SandboxID, keyB, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("kill: %d", resp.StatusCode)
	}
	c := createSB(t, base, keyB, `{"templateID":"base","timeout":120}`)
	if resp := call(t, "DELETE", base+"/sandboxes/"+c.SandboxID, keyB, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("kill: %d", resp.StatusCode)
	}
	relists = s.relists.Load()
	wantError(t, "POST", base+"/sandboxes", keyB, `{"templateID":"base","timeout":120}`, 429, "per minute")
	if n := s.relists.Load(); n != relists {
		t.Errorf("a rate refusal re-listed the sandboxes (%d times); a listing can't change it", n-relists)
	}
	// A sandbox that ended by its timeout no longer counts against the quota.
	short := createSB(t, base, keyC, `{"templateID":"base","timeout":1}`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		infos, _ := sandboxes.List(context.Background(), s.cfg, sandboxes.ListOptions{})
		if !slices.ContainsFunc(infos, func(i sandboxes.Info) bool { return i.ID == short.SandboxID }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a sandbox with a 1 s timeout did not end")
		}
		time.Sleep(100 * time.Millisecond)
	}
	c2 := createSB(t, base, keyC, `{"templateID":"base","timeout":120}`)
	call(t, "DELETE", base+"/sandboxes/"+c2.SandboxID, keyC, "", nil, nil)

	// Nothing half-created: only the one sandbox answered 201 and not
	// killed exists.
	infos, err := sandboxes.List(context.Background(), s.cfg, sandboxes.ListOptions{})
	if err != nil || len(infos) != 1 || infos[0].ID != a.SandboxID {
		t.Errorf("sandboxes after the refusals: %v %v", infos, err)
	}
}

// TestRecordsNotNamedByID: the local variant's directories and sockets
// (visible in /proc/net/unix to any process of the network namespace) don't
// give away sandbox ids.
func TestRecordsNotNamedByID(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	s, base := testServer(t, Options{})
	a := createSB(t, base, testKey, `{"templateID":"base","timeout":120}`)
	ents, _ := os.ReadDir(s.cfg.Options.(local.Options).RuntimeDir)
	for _, e := range ents {
		if strings.Contains(e.Name(), a.SandboxID) {
			t.Errorf("runtime directory entry %s names sandbox %s", e.Name(), a.SandboxID)
		}
	}
	unix, _ := os.ReadFile("/proc/net/unix")
	if strings.Contains(string(unix), a.SandboxID) {
		t.Errorf("/proc/net/unix names sandbox %s", a.SandboxID)
	}
}

// TestShutdownDuringCreate: a create still running when serve shuts down
// leaves no sandbox behind (before, it was committed after the shutdown's
// kill and kept running, held by nobody).
func TestShutdownDuringCreate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	rt := t.TempDir()
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}
	s, err := New(Options{Config: cfg, APIKeys: []string{testKey}})
	if err != nil {
		t.Fatal(err)
	}
	created, proceed := make(chan struct{}), make(chan struct{})
	testHookCreated = func() { close(created); <-proceed }
	t.Cleanup(func() { testHookCreated = nil })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln, false) }()
	status := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/sandboxes", strings.NewReader(`{"templateID":"base","timeout":120}`))
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			status <- 0 // the connection was cut by the shutdown
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	select {
	case <-created:
	case <-time.After(time.Minute):
		t.Fatal("the create did not reach its commit")
	}
	cancel() // shutdown begins while the sandbox exists but isn't held yet
	for {
		s.mu.Lock()
		closing := s.closing
		s.mu.Unlock()
		if closing {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(proceed)
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if st := <-status; st == http.StatusCreated {
		t.Errorf("a create that ended after shutdown began answered 201")
	}
	if left, _ := sandboxes.List(context.Background(), cfg, sandboxes.ListOptions{}); len(left) != 0 {
		for _, i := range left {
			_, _ = sandboxes.Kill(context.Background(), cfg, i.ID, sandboxes.ListOptions{})
		}
		t.Errorf("%d sandboxes left running after shutdown: %v", len(left), left)
	}
}

// unanswering is an Instance whose variant can't be reached right now (the
// engine or API server down): the only failure a real sandbox can't be made
// to show on demand here.
type unanswering struct{ driver.Instance }

func (unanswering) Info(context.Context) (driver.Info, error) {
	return driver.Info{}, fmt.Errorf("%w: the engine is not answering", sandboxes.ErrUnavailable)
}

// TestUnavailableKeepsQuota: a passing failure to read a sandbox answers 503
// and keeps the sandbox counted against its team's quota (before, it was
// forgotten, and the team could run one more than its quota).
func TestUnavailableKeepsQuota(t *testing.T) {
	s, base := testServer(t, Options{Keys: []Key{{Key: keyA, Team: "team-a", Quota: &Quota{Sandboxes: 1}}}})
	s.mu.Lock()
	s.sandboxes["held1"] = &entry{id: "held1", team: "team-a", inst: unanswering{}}
	s.mu.Unlock()
	t.Cleanup(func() { // before the server's own cleanup kills what it holds
		s.mu.Lock()
		delete(s.sandboxes, "held1")
		s.mu.Unlock()
	})
	wantError(t, "GET", base+"/sandboxes/held1", keyA, "", 503, "not answering")
	if s.lookup("held1", "team-a") == nil {
		t.Fatal("a sandbox whose variant didn't answer was forgotten")
	}
	if _, _, err := s.reserve("team-a", false); !errors.Is(err, errQuota) {
		t.Errorf("the team's quota of 1 has room beside a held sandbox: %v", err)
	}
}
