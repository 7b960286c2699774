package hostile_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/e2b"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

// TestBadInputGoAPI: invalid configs, unknown variants, closed sandboxes and
// hostile arguments are each refused with a matchable error and no effect.
func TestBadInputGoAPI(t *testing.T) {
	ctx := ctxBG(time.Minute)
	n := 0
	for _, cfg := range []sandboxes.Config{
		{Variant: "nope"}, {Variant: "../local"}, {Memory: -2}, {Memory: 1000}, {CPU: -2}, {Pids: -2}, {Pids: 3},
		{NetworkPolicy: "sometimes"}, {NetworkPolicy: "allowlist"}, {AllowedHosts: []string{"x.com"}},
		{WorkingDir: "relative"}, {Tags: map[string]string{"bad key!": "v"}}, {Env: map[string]string{"A=B": "c"}},
		{Env: map[string]string{"A\x00": "c"}}, {MaxLifetime: -time.Second}, {Timeout: -time.Second},
		{Name: strings.Repeat("n", 64)},
	} {
		cfg.Options = local.Options{RuntimeDir: rt}
		if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) {
			t.Errorf("Create(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
		n++
	}
	for _, cfg := range []sandboxes.Config{
		{Environment: "ubuntu:latest"}, {Packages: []string{"-r/etc/passwd"}}, {Packages: []string{"x y"}},
	} {
		cfg.Options = local.Options{RuntimeDir: rt}
		if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) {
			t.Errorf("local Create(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
		n++
	}
	for _, id := range []string{"nope", "../..", "/etc", "..", ""} {
		if _, err := sandboxes.Get(ctx, localCfg(), id); !errors.Is(err, sandboxes.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", id, err)
		}
		n++
	}
	if _, err := sandboxes.Kill(ctx, localCfg(), "", sandboxes.ListOptions{}); !errors.Is(err, sandboxes.ErrInvalidInput) {
		t.Errorf("Kill with no selector = %v", err)
	}
	if _, err := sandboxes.Kill(ctx, localCfg(), "../../etc", sandboxes.ListOptions{}); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("Kill(traversal) = %v", err)
	}
	n += 2
	if ents, _ := os.ReadDir(rt); len(ents) != 0 {
		t.Errorf("refused creates left %d entries in the runtime dir", len(ents))
	}
	if testing.Short() {
		t.Logf("RESULT Go API: %d refusals checked (no sandbox needed)", n)
		return
	}
	requireLocal(t)
	sb := newLocal(t, nil)
	run(t, sb, "kept = 1")
	type call struct {
		name string
		f    func() error
		want error
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	calls := []call{
		{"attachment ../x", func() error {
			_, err := sb.RunCode(cctx, "1", sandboxes.WithFiles(map[string][]byte{"../x": nil}))
			return err
		}, sandboxes.ErrInvalidInput},
		{"attachment /etc/x", func() error {
			_, err := sb.RunCode(cctx, "1", sandboxes.WithFiles(map[string][]byte{"/etc/x": nil}))
			return err
		}, sandboxes.ErrInvalidInput},
		{"unknown context", func() error {
			_, err := sb.RunCode(cctx, "1", sandboxes.InContext(sandboxes.Context{ID: "../../x/shutdown"}))
			return err
		}, sandboxes.ErrNotFound},
		{"context and language", func() error {
			_, err := sb.RunCode(cctx, "1", sandboxes.InContext(sandboxes.Context{ID: "x"}), sandboxes.WithLanguage("python"))
			return err
		}, sandboxes.ErrInvalidInput},
		{"unknown language", func() error { _, err := sb.RunCode(cctx, "1", sandboxes.WithLanguage("cobol")); return err }, sandboxes.ErrInvalidInput},
		{"variable name injection", func() error { var v any; return sb.GetVariable(cctx, "__import__('os').system('true')", &v) }, sandboxes.ErrInvalidInput},
		{"set variable bad name", func() error { return sb.SetVariable(cctx, "a; import os", 1) }, sandboxes.ErrInvalidInput},
		{"set variable unencodable", func() error { return sb.SetVariable(cctx, "ch", make(chan int)) }, sandboxes.ErrInvalidInput},
		{"SetTimeout 0", func() error { return sb.SetTimeout(cctx, 0) }, sandboxes.ErrInvalidInput},
		{"Host 0", func() error { _, err := sb.Host(cctx, 0); return err }, sandboxes.ErrInvalidInput},
		{"Host 70000", func() error { _, err := sb.Host(cctx, 70000); return err }, sandboxes.ErrInvalidInput},
		{"read missing file", func() error { _, err := sb.Files().ReadBytes(cctx, "/home/user/nope"); return err }, sandboxes.ErrNotFound},
		{"kill unknown pid", func() error {
			ok, err := sb.Commands().KillProcess(cctx, 999999)
			if err == nil && !ok {
				return sandboxes.ErrNotFound
			}
			return err
		}, sandboxes.ErrNotFound},
	}
	for _, c := range calls {
		if err := c.f(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		n++
	}
	// Path traversal through the files API stays inside the sandbox: the
	// sandbox's own /etc/passwd (with user 1000), never the host's.
	b, err := sb.Files().ReadBytes(cctx, "/home/user/../../../../etc/passwd")
	if err != nil || !strings.Contains(string(b), "user:x:1000:100") {
		t.Errorf("traversal read: %v %q", err, b)
	}
	if err := sb.Files().WriteBytes(cctx, "/home/user/../../usr/evil", []byte("x")); err == nil {
		t.Error("traversal write into /usr succeeded")
	}
	n += 2
	if ex := run(t, sb, "kept"); ex.Text() != "1" {
		t.Errorf("bad input had an effect: state %q", ex.Text())
	}
	// A closed sandbox: every method says ErrClosed.
	sb2 := newLocal(t, nil)
	_ = sb2.Close()
	for name, f := range map[string]func() error{
		"RunCode":     func() error { _, err := sb2.RunCode(cctx, "1"); return err },
		"Files":       func() error { _, err := sb2.Files().ReadBytes(cctx, "/etc/hostname"); return err },
		"Commands":    func() error { _, err := sb2.Commands().Run(cctx, "true"); return err },
		"SetTimeout":  func() error { return sb2.SetTimeout(cctx, time.Minute) },
		"Host":        func() error { _, err := sb2.Host(cctx, 80); return err },
		"Info":        func() error { _, err := sb2.Info(cctx); return err },
		"SetVariable": func() error { return sb2.SetVariable(cctx, "a", 1) },
		"Contexts":    func() error { _, err := sb2.Contexts(cctx); return err },
	} {
		if err := f(); !errors.Is(err, sandboxes.ErrClosed) {
			t.Errorf("closed sandbox %s: %v, want ErrClosed", name, err)
		}
		n++
	}
	if err := sb2.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	t.Logf("RESULT Go API: %d bad calls refused with the documented error, no effect", n)
}

// agentClient talks to a local sandbox's agent directly over its socket.
func agentClient(t *testing.T, id string) (*http.Client, string) {
	r := readRec(t, rt, id)
	sock := filepath.Join(local.SandboxDir(rt, id), "agent.sock")
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}, r.Token
}

func do(t *testing.T, hc *http.Client, method, url string, hdr map[string]string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// TestBadInputAgentHTTP: the agent's endpoints, called directly with
// malformed, oversized, traversing or unauthenticated requests.
func TestBadInputAgentHTTP(t *testing.T) {
	requireLocal(t)
	sb := newLocal(t, nil)
	run(t, sb, "kept = 1")
	hc, tok := agentClient(t, sb.ID())
	auth := map[string]string{"X-Access-Token": tok, "Content-Type": "application/json"}
	bad := map[string]string{"X-Access-Token": tok + "x"}
	huge := bytes.Repeat([]byte("a"), 9<<20)
	cases := []struct {
		name, method, path string
		hdr                map[string]string
		body               []byte
		want               int // exact status, or 4 = any 4xx
	}{
		{"no token /execute", "POST", "/execute", nil, []byte(`{"code":"1"}`), 401},
		{"wrong token /execute", "POST", "/execute", bad, []byte(`{"code":"1"}`), 401},
		{"wrong token /x/shutdown", "POST", "/x/shutdown", bad, nil, 401},
		{"wrong token /files", "GET", "/files?path=/etc/passwd", bad, nil, 401},
		{"wrong token envd", "POST", "/process.Process/List", bad, []byte(`{}`), 401},
		{"malformed /execute", "POST", "/execute", auth, []byte(`{"code":`), 400},
		{"wrong type /execute", "POST", "/execute", auth, []byte(`{"code": 5}`), 400},
		{"negative timeout", "POST", "/execute", auth, []byte(`{"code":"1","timeout":-1}`), 400},
		{"huge /execute", "POST", "/execute", auth, append(append([]byte(`{"code":"`), huge...), '"', '}'), 4},
		{"unknown context", "POST", "/execute", auth, []byte(`{"code":"1","context_id":"nope"}`), 404},
		{"both context and language", "POST", "/execute", auth, []byte(`{"code":"1","context_id":"a","language":"python"}`), 400},
		{"malformed /contexts", "POST", "/contexts", auth, []byte(`[[[`), 400},
		{"delete unknown context", "DELETE", "/contexts/nope", auth, nil, 404},
		{"restart unknown context", "POST", "/contexts/nope/restart", auth, nil, 404},
		{"variable bad name", "GET", "/x/contexts/default/variables/a;b", auth, nil, 400},
		{"variable bad value", "PUT", "/x/contexts/default/variables/v", auth, []byte(`{nope`), 400},
		{"malformed /x/timeout", "POST", "/x/timeout", auth, []byte(`{"timeout":"soon"}`), 400},
		{"negative /x/timeout", "POST", "/x/timeout", auth, []byte(`{"timeout":-5}`), 400},
		{"forward bad port", "GET", "/x/forward/99999", auth, nil, 4},
		{"files traversal outside", "GET", "/files?path=../../../../proc/1/environ", auth, nil, 4},
		{"envd malformed", "POST", "/process.Process/Start", auth, []byte(`{"process":`), 4},
	}
	for _, c := range cases {
		var body io.Reader
		if c.body != nil {
			body = bytes.NewReader(c.body)
		}
		code, msg := do(t, hc, c.method, "http://sandbox"+c.path, c.hdr, body)
		ok := code == c.want || (c.want == 4 && code >= 400 && code < 500)
		if !ok {
			t.Errorf("%s: status %d (%.200s), want %d", c.name, code, msg, c.want)
		}
		if code >= 400 && code != 415 && strings.TrimSpace(msg) == "" {
			// (415 is connect-go's answer to a wrong content type: no body.)
			t.Errorf("%s: status %d without a message", c.name, code)
		}
	}
	// No effect: still alive, state kept, lifetime unchanged, no extra context.
	if ex := run(t, sb, "kept"); ex.Text() != "1" {
		t.Errorf("bad requests had an effect: %q %v", ex.Text(), ex.Error)
	}
	// (The listing has one default context per language, as E2B's: python
	// and javascript. A bad request must have added none.)
	cs, err := sb.Contexts(ctxBG(30 * time.Second))
	langs := map[string]int{}
	for _, c := range cs {
		langs[c.Language]++
	}
	if err != nil || len(cs) > 2 || langs["python"] > 1 || langs["javascript"] > 1 {
		t.Errorf("contexts after bad requests: %v %v", cs, err)
	}
	t.Logf("RESULT agent HTTP: %d malformed/oversized/unauthenticated/traversing requests refused with a clear 4xx; no effect", len(cases))
}

// TestBadInputServerHTTP: the serve control and data planes.
func TestBadInputServerHTTP(t *testing.T) {
	requireLocal(t)
	srt, err := os.MkdirTemp("", "cs-hostile-bad-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(srt)
	s, err := e2bserver.New(e2bserver.Options{APIKeys: []string{testKey}, Config: sandboxes.Config{Options: local.Options{RuntimeDir: srt}}})
	if err != nil {
		t.Fatal(err)
	}
	base, stop, err := s.StartLoopback(false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("HANG: server shutdown: %v", err)
		}
		waitGoneDir(t, srt)
	}()
	// One real sandbox, for the data plane.
	cfg := sandboxes.Config{Variant: "e2b", Options: e2b.Options{APIKey: testKey, APIURL: base, SandboxURL: base}}
	sb, err := sandboxes.Create(ctxBG(time.Minute), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	run(t, sb, "kept = 1")
	hc := &http.Client{Timeout: 30 * time.Second}
	key := map[string]string{"X-API-Key": testKey, "Content-Type": "application/json"}
	huge := append(append([]byte(`{"templateID":"base","metadata":{"a":"`), bytes.Repeat([]byte("a"), 20<<20)...), '"', '}', '}')
	cases := []struct {
		name, method, path string
		hdr                map[string]string
		body               []byte
		want               int
	}{
		{"no key", "GET", "/sandboxes", nil, nil, 401},
		{"wrong key", "POST", "/sandboxes", map[string]string{"X-API-Key": "e2b_00"}, []byte(`{"templateID":"base"}`), 401},
		{"malformed create", "POST", "/sandboxes", key, []byte(`{"templateID":`), 400},
		{"wrong types", "POST", "/sandboxes", key, []byte(`{"templateID":5,"timeout":"x"}`), 400},
		{"unknown template", "POST", "/sandboxes", key, []byte(`{"templateID":"../../etc"}`), 4},
		{"negative timeout", "POST", "/sandboxes", key, []byte(`{"templateID":"base","timeout":-1}`), 400},
		{"huge body", "POST", "/sandboxes", key, huge, 4},
		{"get traversal", "GET", "/sandboxes/..%2F..%2Fetc", key, nil, 4},
		{"delete unknown", "DELETE", "/sandboxes/nope", key, nil, 404},
		{"timeout unknown", "POST", "/sandboxes/nope/timeout", key, []byte(`{"timeout":10}`), 404},
		{"bad next token", "GET", "/v2/sandboxes?nextToken=%21%21not-base64", key, nil, 400},
		{"bad metadata query", "GET", "/v2/sandboxes?metadata=a%3D1%26a%3D2", key, nil, 400},
		// E2B's proxy answers 502 "The sandbox was not found"; so do we.
		{"data plane traversal id", "GET", "/health", map[string]string{"E2b-Sandbox-Id": "../../x"}, nil, 502},
		{"data plane unknown id", "POST", "/execute", map[string]string{"E2b-Sandbox-Id": "nope"}, []byte(`{"code":"1"}`), 502},
		{"data plane bad port", "GET", "/health", map[string]string{"E2b-Sandbox-Id": sb.ID(), "E2b-Sandbox-Port": "99999"}, nil, 4},
		{"data plane no token", "POST", "/execute", map[string]string{"E2b-Sandbox-Id": sb.ID(), "E2b-Sandbox-Port": "49999"}, []byte(`{"code":"kept = 2"}`), 401},
		{"data plane wrong token", "POST", "/execute", map[string]string{"E2b-Sandbox-Id": sb.ID(), "E2b-Sandbox-Port": "49999", "X-Access-Token": "nope"}, []byte(`{"code":"kept = 2"}`), 401},
	}
	for _, c := range cases {
		var body io.Reader
		if c.body != nil {
			body = bytes.NewReader(c.body)
		}
		code, msg := do(t, hc, c.method, base+c.path, c.hdr, body)
		ok := code == c.want || (c.want == 4 && code >= 400 && code < 500)
		if !ok {
			t.Errorf("%s: status %d (%.200s), want %d", c.name, code, msg, c.want)
		}
		if code >= 400 && strings.TrimSpace(msg) == "" {
			t.Errorf("%s: status %d without a message", c.name, code)
		}
	}
	if ex := run(t, sb, "kept"); ex.Text() != "1" {
		t.Errorf("bad requests had an effect: %q %v", ex.Text(), ex.Error)
	}
	if ents, _ := os.ReadDir(srt); len(ents) != 1 {
		t.Errorf("bad creates made sandboxes: %d in the runtime dir", len(ents))
	}
	t.Logf("RESULT serve HTTP: %d bad control/data-plane requests refused with a clear 4xx; no sandbox created, state intact", len(cases))
}
