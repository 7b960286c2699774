package e2bserver

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// envdCall sends one request to port 49983 or 49999 of sandbox id through
// the proxy, with token in X-Access-Token when not "", and returns the
// status and body.
func envdCall(t *testing.T, base, id, port, token, method, path, contentType string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", port)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// upload is a multipart body of one file, as the SDKs send to POST /files.
func upload(t *testing.T, content string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("file", "f.txt")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write([]byte(content))
	_ = mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}

// TestInsecureSandboxes: secure: false (E2B's envd without an access
// token) only behind serve's --allow-insecure-sandboxes; with it, that
// sandbox's envd and interpreter answer requests without a token, while a
// secure sandbox beside it still refuses them, and the control plane still
// needs the team's key.
func TestInsecureSandboxes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	const insecureBody = `{"templateID":"code-interpreter-v1","timeout":120,"secure":false}`

	// Without the operator's opt-in: refused, naming the flag.
	_, plain := testServer(t, Options{})
	wantError(t, "POST", plain+"/sandboxes", testKey, insecureBody, 400, "--allow-insecure-sandboxes")

	_, base := testServer(t, Options{AllowInsecureSandboxes: true, Keys: []Key{{Key: keyA, Team: "a"}, {Key: keyB, Team: "b"}}})
	var raw map[string]any
	resp := call(t, "POST", base+"/sandboxes", keyA, insecureBody, nil, &raw)
	if resp.StatusCode != 201 {
		t.Fatalf("create with secure false: %d %v", resp.StatusCode, raw)
	}
	id, _ := raw["sandboxID"].(string)
	if tok, ok := raw["envdAccessToken"]; ok && tok != nil {
		t.Errorf("an insecure sandbox's create answer has envdAccessToken %v; E2B's has none", tok)
	}
	secure := createSB(t, base, keyA, `{"templateID":"code-interpreter-v1","timeout":120}`)

	// Its envd and interpreter without a token: code, files, a Connect RPC.
	code, _ := json.Marshal(map[string]string{"code": `open("/home/user/open.txt", "w").write("no token"); print(6*7)`})
	if st, out := envdCall(t, base, id, "49999", "", "POST", "/execute", "application/json", code); st != 200 || !strings.Contains(out, "42") {
		t.Fatalf("POST /execute without a token on the insecure sandbox: %d %s", st, out)
	}
	if st, out := envdCall(t, base, id, "49983", "", "GET", "/files?path=/home/user/open.txt", "", nil); st != 200 || out != "no token" {
		t.Errorf("GET /files without a token on the insecure sandbox: %d %q", st, out)
	}
	body, ct := upload(t, "uploaded")
	if st, out := envdCall(t, base, id, "49983", "", "POST", "/files?path=/home/user/up.txt", ct, body); st != 200 {
		t.Errorf("POST /files without a token on the insecure sandbox: %d %s", st, out)
	}
	if st, out := envdCall(t, base, id, "49983", "", "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/home/user/up.txt"}`)); st != 200 || !strings.Contains(out, "up.txt") {
		t.Errorf("filesystem.Filesystem/Stat without a token on the insecure sandbox: %d %s", st, out)
	}
	if st, out := envdCall(t, base, id, "49999", "", "GET", "/contexts", "", nil); st != 200 {
		t.Errorf("GET /contexts without a token on the insecure sandbox: %d %s", st, out)
	}

	// The secure sandbox beside it: still refused without its token (and
	// with a wrong one), still open with it.
	for _, tok := range []string{"", strings.Repeat("0", 64)} {
		if st, out := envdCall(t, base, secure.SandboxID, "49999", tok, "POST", "/execute", "application/json", code); st != 401 {
			t.Errorf("POST /execute on the secure sandbox with token %q: %d %s, want 401", tok, st, out)
		}
		if st, out := envdCall(t, base, secure.SandboxID, "49983", tok, "GET", "/files?path=/etc/hostname", "", nil); st != 401 {
			t.Errorf("GET /files on the secure sandbox with token %q: %d %s, want 401", tok, st, out)
		}
		if st, out := envdCall(t, base, secure.SandboxID, "49983", tok, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/home/user"}`)); st != 401 {
			t.Errorf("Stat on the secure sandbox with token %q: %d %s, want 401", tok, st, out)
		}
	}
	if out := execute(t, base, secure, `print(6*7)`); !strings.Contains(out, "42") {
		t.Errorf("execute on the secure sandbox with its token: %s", out)
	}

	// Connect and details: still no token for the insecure one, the token
	// for the secure one; and the control plane stays the team's.
	var c map[string]any
	if resp := call(t, "POST", base+"/sandboxes/"+id+"/connect", keyA, `{"timeout":120}`, nil, &c); resp.StatusCode/100 != 2 {
		t.Fatalf("connect: %d %v", resp.StatusCode, c)
	}
	if tok, ok := c["envdAccessToken"]; ok && tok != nil {
		t.Errorf("connect to an insecure sandbox answered envdAccessToken %v", tok)
	}
	var d map[string]any
	call(t, "GET", base+"/sandboxes/"+id, keyA, "", nil, &d)
	if tok, ok := d["envdAccessToken"]; ok && tok != nil {
		t.Errorf("details of an insecure sandbox have envdAccessToken %v", tok)
	}
	var ds map[string]any
	call(t, "GET", base+"/sandboxes/"+secure.SandboxID, keyA, "", nil, &ds)
	if ds["envdAccessToken"] != secure.EnvdAccessToken {
		t.Errorf("details of the secure sandbox: envdAccessToken %v", ds["envdAccessToken"])
	}
	for _, k := range []string{"", keyB} {
		if resp := call(t, "GET", base+"/sandboxes/"+id, k, "", nil, nil); resp.StatusCode != 401 && resp.StatusCode != 404 {
			t.Errorf("details of the insecure sandbox with key %q: %d, want 401/404", k, resp.StatusCode)
		}
		if resp := call(t, "DELETE", base+"/sandboxes/"+id, k, "", nil, nil); resp.StatusCode != 401 && resp.StatusCode != 404 {
			t.Errorf("kill of the insecure sandbox with key %q: %d, want 401/404", k, resp.StatusCode)
		}
	}
}
