package e2bserver

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/mcptest"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
	"github.com/code-sandboxes/code-sandboxes/mcptools"
)

// toolSets is serve's --tool-server mcptest=…: the test MCP server's tools.
func toolSets(t *testing.T) map[string][]sandboxes.Tool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcptest.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	tools, err := mcptools.Tools(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]sandboxes.Tool{"mcptest": tools}
}

// TestToolGrantsHTTP: the create body's "tools" extension, refused with the
// reason when it names what serve doesn't have.
func TestToolGrantsHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	_, base := testServer(t, Options{ToolSets: toolSets(t)})
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","tools":["nosuch"]}`, 400, `"nosuch" is no tool set of this server (it has: mcptest)`)
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","tools":["mcptest.nosuch"]}`, 400, `tool set "mcptest" has no tool "nosuch"`)
	var sb sandboxJSON
	resp := call(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","timeout":60,"tools":["mcptest.shout"]}`, nil, &sb)
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	hdr := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49999", "X-Access-Token": sb.EnvdAccessToken}
	resp, body := callRaw(t, "POST", base+"/execute", `{"code":"import tools\nprint(tools.shout(text='hi'), tools.names())"}`, hdr)
	if resp.StatusCode != 200 || !strings.Contains(body, `HI ['shout']`) {
		t.Errorf("execute: %d %s", resp.StatusCode, body)
	}
	call(t, "DELETE", base+"/sandboxes/"+sb.SandboxID, testKey, "", nil, nil)
}

// TestOfficialJSSDKTools: the official JS SDK, unmodified, creates a
// sandbox granted a tool set through metadata, and its code calls the tools.
func TestOfficialJSSDKTools(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	node, npm := needNode(t)
	npmCI(t, npm)
	_, url := testServer(t, Options{ToolSets: toolSets(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep := runNodeScript(ctx, t, node, "tools.test.mjs", url, "PROBE="+hostListener(t))
	type out struct {
		Stdout string `json:"stdout"`
		Error  string `json:"error"`
	}
	get := func(name string) out {
		t.Helper()
		var o out
		if err := json.Unmarshal(rep.Steps[name], &o); err != nil {
			t.Fatalf("step %s: %v: %s", name, err, rep.Steps[name])
		}
		return o
	}
	if o := get("loop"); o.Stdout != "499500\n" || o.Error != "" {
		t.Errorf("1,000 calls: %+v", o)
	}
	if o := get("toolError"); o.Error != "ToolError: no such record" {
		t.Errorf("tool error: %+v", o)
	}
	if o := get("ungranted"); !strings.Contains(o.Error, `ToolError: tool "secret" is not granted`) {
		t.Errorf("ungranted: %+v", o)
	}
	if o := get("oversized"); !strings.Contains(o.Error, "ValueError") || !strings.Contains(o.Error, "over the limit") {
		t.Errorf("oversized: %+v", o)
	}
	if o := get("network"); !strings.HasPrefix(o.Stdout, "no network:") {
		t.Errorf("network none: %+v", o)
	}
	var bad struct{ Thrown, Message string }
	_ = json.Unmarshal(rep.Steps["badGrant"], &bad)
	if bad.Thrown == "" || !strings.Contains(bad.Message, "no tool set") {
		t.Errorf("a bad grant: %s", rep.Steps["badGrant"])
	}
}

// callRaw is call for a streaming answer: the status and the whole body.
func callRaw(t *testing.T, method, u, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, string(b)
}

// hostListener listens on one of the host's own addresses (never loopback)
// and returns host:port: what a sandbox with network none must not reach.
func hostListener(t *testing.T) string {
	t.Helper()
	addrs, err := testnet.HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", net.JoinHostPort(a, "0"))
		if err != nil {
			continue
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return ln.Addr().String()
	}
	t.Fatalf("no host address to listen on (%v)", addrs)
	return ""
}
