package e2bserver

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// call sends one request and decodes a JSON answer into out (when non-nil).
func call(t *testing.T, method, u, key, body string, hdr map[string]string, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if strings.EqualFold(k, "Host") {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d, body not JSON: %v: %q", method, u, resp.StatusCode, err, b)
		}
	}
	return resp
}

// wantError checks an E2B error answer: the status and the same code in the
// JSON body (the JS SDK reads the body's code), and a message mentioning want.
func wantError(t *testing.T, method, u, key, body string, status int, want string) {
	t.Helper()
	var e apiError
	resp := call(t, method, u, key, body, nil, &e)
	if resp.StatusCode != status || e.Code != status {
		t.Errorf("%s %s: status %d, body code %d; want %d", method, u, resp.StatusCode, e.Code, status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, u, ct)
	}
	if !strings.Contains(e.Message, want) {
		t.Errorf("%s %s: message %q does not mention %q", method, u, e.Message, want)
	}
}

func TestNewRefusesKeysTheSDKsRefuse(t *testing.T) {
	for _, k := range []string{"", "secret", "e2b_XYZ", "E2B_abc", "e2b_"} {
		if _, err := New(Options{APIKeys: []string{k}}); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
	if _, err := New(Options{}); err == nil {
		t.Error("no key accepted")
	}
	if _, err := New(Options{APIKeys: []string{testKey}, DefaultNetwork: "allowlist"}); err == nil {
		t.Error("default network allowlist accepted")
	}
}

func TestControlPlaneErrors(t *testing.T) {
	_, base := testServer(t, Options{})

	// Authentication: missing and wrong keys, on existing and unknown routes.
	wantError(t, "POST", base+"/sandboxes", "", `{"templateID":"base"}`, 401, "API key")
	wantError(t, "GET", base+"/v2/sandboxes", "e2b_00", "", 401, "API key")
	wantError(t, "GET", base+"/nowhere", "", "", 401, "API key")
	if resp := call(t, "GET", base+"/health", "", "", nil, nil); resp.StatusCode != http.StatusNoContent {
		t.Errorf("GET /health without a key: %d, want 204", resp.StatusCode)
	}

	// Create: bodies and fields the server must refuse before starting anything.
	for _, path := range []string{"/sandboxes", "/v2/sandboxes"} {
		wantError(t, "POST", base+path, testKey, `{"templateID":`, 400, "invalid JSON")
		wantError(t, "POST", base+path, testKey, `[1,2]`, 400, "invalid JSON")
		wantError(t, "POST", base+path, testKey, ``, 400, "empty")
		wantError(t, "POST", base+path, testKey, `{"templateID":"ubuntu"}`, 400, "base, code-interpreter-v1")
		wantError(t, "POST", base+path, testKey, `{}`, 400, "base, code-interpreter-v1")
	}
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","timeout":0}`, 400, "timeout")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","timeout":9999999}`, 400, "longer")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","timeout":"5"}`, 400, "invalid JSON")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","metadata":{"e2bserver/template":"x"}}`, 400, "reserved")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","metadata":{"has space":"x"}}`, 400, "has space")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","envVars":{"A=B":"x"}}`, 400, "A=B")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","autoPause":true}`, 400, "autoPause")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","network":{"denyOut":["example.com"]}}`, 400, "denyOut")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","secure":false}`, 400, "secure: false")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","volumeMounts":[{"name":"v","path":"/v"}]}`, 400, "volume")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","metadata":{"k":"`+strings.Repeat("x", maxAPIBody)+`"}}`, 413, "larger")

	// Unknown sandboxes: 404 with the code in the body, on every route.
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/sandboxes/nosuchsandbox", ""},
		{"DELETE", "/sandboxes/nosuchsandbox", ""},
		{"POST", "/sandboxes/nosuchsandbox/timeout", `{"timeout":30}`},
		{"POST", "/sandboxes/nosuchsandbox/connect", `{"timeout":30}`},
		{"POST", "/v2/sandboxes/nosuchsandbox/connect", `{"timeout":30}`},
		{"POST", "/sandboxes/nosuchsandbox/pause", `{}`},
		{"POST", "/sandboxes/nosuchsandbox/resume", `{}`},
		{"GET", "/sandboxes/nosuchsandbox/metrics", ""},
		{"GET", "/sandboxes/..%2F..%2Fetc", ""},
		{"GET", "/sandboxes/UPPER", ""},
	} {
		wantError(t, r.method, base+r.path, testKey, r.body, 404, "not found")
	}
	wantError(t, "GET", base+"/no-such-route", testKey, "", 404, "no route")

	// Listing: bad filters are 400s, an empty result is [] (never null).
	wantError(t, "GET", base+"/v2/sandboxes?state=sleeping", testKey, "", 400, "sleeping")
	wantError(t, "GET", base+"/v2/sandboxes?limit=0", testKey, "", 400, "limit")
	wantError(t, "GET", base+"/v2/sandboxes?limit=101", testKey, "", 400, "limit")
	wantError(t, "GET", base+"/v2/sandboxes?nextToken=%21%21", testKey, "", 400, "nextToken")
	wantError(t, "GET", base+"/v2/sandboxes?order=sideways", testKey, "", 400, "order")
	wantError(t, "GET", base+"/v2/sandboxes?metadata="+url.QueryEscape("a=%zz"), testKey, "", 400, "metadata")
	for _, path := range []string{"/v2/sandboxes", "/sandboxes", "/v2/sandboxes?state=running,paused&limit=5"} {
		var list []listedSandbox
		resp := call(t, "GET", base+path, testKey, "", nil, &list)
		if resp.StatusCode != 200 || list == nil || len(list) != 0 {
			t.Errorf("GET %s: %d %v, want 200 []", path, resp.StatusCode, list)
		}
	}

	// Data plane: an unknown sandbox is E2B's 502, which the SDKs read as
	// "sandbox gone"; a malformed port is the client's error.
	var gone map[string]any
	resp := call(t, "POST", base+"/execute", "", `{"code":"1"}`, map[string]string{"E2b-Sandbox-Id": "nosuchsandbox", "E2b-Sandbox-Port": "49999"}, &gone)
	if resp.StatusCode != 502 || gone["code"] != float64(502) || gone["sandboxId"] != "nosuchsandbox" || gone["message"] != "The sandbox was not found" {
		t.Errorf("data plane, unknown sandbox: %d %v", resp.StatusCode, gone)
	}
	resp = call(t, "GET", base+"/health", "", "", map[string]string{"Host": "49983-nosuchsandbox.localhost"}, &gone)
	if resp.StatusCode != 502 {
		t.Errorf("data plane by host, unknown sandbox: %d", resp.StatusCode)
	}
	resp = call(t, "GET", base+"/health", "", "", map[string]string{"E2b-Sandbox-Id": "x", "E2b-Sandbox-Port": "http"}, nil)
	if resp.StatusCode != 400 {
		t.Errorf("data plane, bad port: %d, want 400", resp.StatusCode)
	}
}

// jsMetadata encodes a metadata filter the way the JS SDK does:
// encodeURIComponent on keys and values, then URLSearchParams, then the HTTP
// client's own query encoding.
func jsMetadata(m map[string]string) string {
	v := url.Values{}
	for k, val := range m {
		v.Set(url.PathEscape(k), url.PathEscape(val))
	}
	return url.QueryEscape(v.Encode())
}

func TestParseMetadataQuery(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want map[string]string
	}{
		{"", nil},
		{"a=1", map[string]string{"a": "1"}},
		{"a=1&b=2", map[string]string{"a": "1", "b": "2"}},
		// JS: encodeURIComponent then URLSearchParams (the '%' encoded again).
		{"note=a%2526b%253Dc%2520d%252F%25C3%25A9", map[string]string{"note": "a&b=c d/é"}},
		// Python: urlencode once; a lone '%' left over survives.
		{"note=a%26b%3Dc+d", map[string]string{"note": "a&b=c d"}},
		{"pct=50%25", map[string]string{"pct": "50%"}},
		{"empty=", map[string]string{"empty": ""}},
	} {
		got, err := parseMetadataQuery(c.raw)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseMetadataQuery(%q) = %v, %v; want %v", c.raw, got, err, c.want)
		}
	}
	if _, err := parseMetadataQuery("a=1&a=2"); err == nil {
		t.Error("conflicting duplicate key accepted")
	}
}

// TestSandboxLifecycleHTTP drives the control and data planes with plain
// HTTP: paging, filters, secure=false, token handling, streaming and
// forwarding to a port inside the sandbox.
func TestSandboxLifecycleHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	s, base := testServer(t, Options{})

	create := func(body string) sandboxJSON {
		t.Helper()
		var sb sandboxJSON
		resp := call(t, "POST", base+"/sandboxes", testKey, body, nil, &sb)
		if resp.StatusCode != 201 || sb.SandboxID == "" {
			t.Fatalf("create %s: %d %+v", body, resp.StatusCode, sb)
		}
		return sb
	}
	a := create(`{"templateID":"base","timeout":120,"metadata":{"team":"x y&z","n":"1"}}`)
	time.Sleep(10 * time.Millisecond) // distinct start times make the order certain
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","secure":false}`, 400, "secure: false")
	b := create(`{"templateID":"code-interpreter-v1","timeout":120,"metadata":{"team":"x y&z","n":"2"},"allow_internet_access":true}`)
	time.Sleep(10 * time.Millisecond)
	c := create(`{"templateID":"base","timeout":120,"metadata":{"team":"other"}}`)

	if a.EnvdAccessToken == "" || b.EnvdAccessToken == "" || a.TrafficAccessToken == nil || *a.TrafficAccessToken == "" || a.ClientID != clientID || a.EnvdVersion != EnvdVersion || a.TemplateID != "base" {
		t.Errorf("create answers: %+v / %+v", a, b)
	}
	if got := s.Created(); len(got) != 3 {
		t.Errorf("tracked %v", got)
	}

	// Paging, newest first, with the JS SDK's metadata encoding.
	var page1, page2 []listedSandbox
	filter := jsMetadata(map[string]string{"team": "x y&z"})
	resp := call(t, "GET", base+"/v2/sandboxes?limit=1&metadata="+filter, testKey, "", nil, &page1)
	next := resp.Header.Get("X-Next-Token")
	if len(page1) != 1 || page1[0].SandboxID != b.SandboxID || next == "" {
		t.Fatalf("page 1: %+v, next %q", page1, next)
	}
	resp = call(t, "GET", base+"/v2/sandboxes?limit=1&metadata="+filter+"&nextToken="+url.QueryEscape(next), testKey, "", nil, &page2)
	if len(page2) != 1 || page2[0].SandboxID != a.SandboxID || resp.Header.Get("X-Next-Token") != "" {
		t.Fatalf("page 2: %+v, next %q", page2, resp.Header.Get("X-Next-Token"))
	}
	if page2[0].Metadata["team"] != "x y&z" || page2[0].Metadata["n"] != "1" || len(page2[0].Metadata) != 2 {
		t.Errorf("metadata: %v", page2[0].Metadata)
	}
	var asc, paused, byTemplate, v1 []listedSandbox
	call(t, "GET", base+"/v2/sandboxes?order=asc", testKey, "", nil, &asc)
	if ids := idsOf(asc); !slices.Equal(ids, []string{a.SandboxID, b.SandboxID, c.SandboxID}) {
		t.Errorf("order=asc: %v", ids)
	}
	call(t, "GET", base+"/v2/sandboxes?state=paused", testKey, "", nil, &paused)
	call(t, "GET", base+"/v2/sandboxes?template=code-interpreter-v1", testKey, "", nil, &byTemplate)
	call(t, "GET", base+"/sandboxes?metadata="+url.QueryEscape("team=other"), testKey, "", nil, &v1)
	if len(paused) != 0 || !slices.Equal(idsOf(byTemplate), []string{b.SandboxID}) || !slices.Equal(idsOf(v1), []string{c.SandboxID}) {
		t.Errorf("filters: paused %v, template %v, v1 %v", idsOf(paused), idsOf(byTemplate), idsOf(v1))
	}

	// Detail.
	var d sandboxDetail
	call(t, "GET", base+"/sandboxes/"+b.SandboxID, testKey, "", nil, &d)
	if !d.AllowInternetAccess || d.EnvdAccessToken != b.EnvdAccessToken || d.State != "running" || d.DiskSizeMB == 0 || d.MemoryMB == 0 || d.EndAt.Sub(d.StartedAt) < 119*time.Second {
		t.Errorf("detail of b: %+v", d)
	}
	call(t, "GET", base+"/sandboxes/"+a.SandboxID, testKey, "", nil, &d)
	if d.AllowInternetAccess || d.EnvdAccessToken != a.EnvdAccessToken {
		t.Errorf("detail of a: network all %v, token %q", d.AllowInternetAccess, d.EnvdAccessToken)
	}

	// Pause is refused plainly; connect returns the token and extends only.
	wantError(t, "POST", base+"/sandboxes/"+a.SandboxID+"/pause", testKey, `{}`, 501, "gvisor")
	var conn sandboxJSON
	if resp := call(t, "POST", base+"/v2/sandboxes/"+a.SandboxID+"/connect", testKey, `{"timeout":10}`, nil, &conn); resp.StatusCode != 200 || conn.EnvdAccessToken != a.EnvdAccessToken {
		t.Errorf("connect: %d %+v", resp.StatusCode, conn)
	}
	call(t, "GET", base+"/sandboxes/"+a.SandboxID, testKey, "", nil, &d)
	if time.Until(d.EndAt) < 100*time.Second {
		t.Errorf("connect with a shorter timeout shortened the sandbox's life: ends in %s", time.Until(d.EndAt))
	}
	if resp := call(t, "POST", base+"/sandboxes/"+a.SandboxID+"/timeout", testKey, `{"timeout":30}`, nil, nil); resp.StatusCode != 204 {
		t.Errorf("timeout: %d", resp.StatusCode)
	}
	call(t, "GET", base+"/sandboxes/"+a.SandboxID, testKey, "", nil, &d)
	if left := time.Until(d.EndAt); left > 31*time.Second || left < 25*time.Second {
		t.Errorf("after timeout 30 the sandbox ends in %s", left)
	}

	// Data plane tokens: every sandbox needs its own on envd; the
	// interpreter's /contexts takes the traffic token instead (the code
	// interpreter SDKs send that one there).
	envd := func(sb sandboxJSON, tok string) int {
		h := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983", "Connect-Protocol-Version": "1"}
		if tok != "" {
			h["X-Access-Token"] = tok
		}
		return call(t, "POST", base+"/process.Process/List", "", `{}`, h, nil).StatusCode
	}
	if st := envd(a, ""); st != 401 {
		t.Errorf("secure sandbox without token: %d, want 401", st)
	}
	if st := envd(a, a.EnvdAccessToken); st != 200 {
		t.Errorf("secure sandbox with token: %d", st)
	}
	if st := envd(b, ""); st != 401 {
		t.Errorf("sandbox b without token: %d, want 401", st)
	}
	if st := call(t, "GET", base+"/contexts", "", "", map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49999", "E2B-Traffic-Access-Token": *a.TrafficAccessToken}, nil).StatusCode; st != 200 {
		t.Errorf("GET /contexts with the traffic token: %d", st)
	}
	if st := call(t, "POST", base+"/execute", "", `{"code":"1"}`, map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49999"}, nil).StatusCode; st != 401 {
		t.Errorf("POST /execute without token on a secure sandbox: %d, want 401", st)
	}

	// Streaming: the first line must arrive while the code still runs.
	req, _ := http.NewRequest("POST", base+"/execute", strings.NewReader(`{"code":"import time\nprint('early', flush=True)\ntime.sleep(2)\nprint('late')"}`))
	req.Header.Set("E2b-Sandbox-Id", a.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("X-Access-Token", a.EnvdAccessToken)
	start := time.Now()
	sresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(sresp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "early") {
			break
		}
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("first output line took %s: the proxy buffers", took)
	}
	rest, _ := io.ReadAll(sresp.Body)
	sresp.Body.Close()
	if !strings.Contains(string(rest), "late") || !strings.Contains(string(rest), "end_of_execution") {
		t.Errorf("rest of the stream: %s", rest)
	}

	// A port inside the sandbox, by E2B's host form (network none: only
	// the agent's tunnel reaches it).
	h := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49999", "X-Access-Token": a.EnvdAccessToken}
	call(t, "POST", base+"/execute", "", `{"code":"import subprocess, sys, time, socket\np = subprocess.Popen([sys.executable, '-m', 'http.server', '8000', '--bind', '127.0.0.1'], cwd='/tmp', stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\nfor _ in range(100):\n    try:\n        socket.create_connection(('127.0.0.1', 8000)).close(); break\n    except OSError:\n        time.sleep(0.05)"}`, h, nil)
	fr := call(t, "GET", base+"/", "", "", map[string]string{"Host": "8000-" + a.SandboxID + ".localhost"}, nil)
	if fr.StatusCode != 200 {
		t.Errorf("GET through port 8000: %d", fr.StatusCode)
	}
	var closed map[string]any
	fr = call(t, "GET", base+"/", "", "", map[string]string{"Host": "8001-" + a.SandboxID + ".localhost"}, &closed)
	if fr.StatusCode != 502 || !strings.Contains(closed["message"].(string), "8001") {
		t.Errorf("GET through closed port 8001: %d %v", fr.StatusCode, closed)
	}

	// Kill: 204, then 404, then the data plane says the sandbox is gone.
	if resp := call(t, "DELETE", base+"/sandboxes/"+c.SandboxID, testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Errorf("kill: %d", resp.StatusCode)
	}
	wantError(t, "DELETE", base+"/sandboxes/"+c.SandboxID, testKey, "", 404, "not found")
	if st := envd(c, c.EnvdAccessToken); st != 502 {
		t.Errorf("envd of a killed sandbox: %d, want 502", st)
	}
	if got := s.Created(); len(got) != 2 {
		t.Errorf("tracked after kill: %v", got)
	}
	// a and b are left to the server's shutdown, which must kill them.
}

func idsOf(l []listedSandbox) []string {
	out := make([]string, 0, len(l))
	for _, s := range l {
		out = append(out, s.SandboxID)
	}
	return out
}
