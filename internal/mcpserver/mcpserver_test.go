package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/mcpserver"
	"github.com/code-sandboxes/code-sandboxes/internal/mcptest"
	"github.com/code-sandboxes/code-sandboxes/local"
	"github.com/code-sandboxes/code-sandboxes/mcptools"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

const stdioEnv = "CODE_SANDBOXES_MCPSERVER_TEST_STDIO"

// TestMain doubles as `code-sandboxes mcp` over stdio when the stdio test
// starts this binary as the server.
func TestMain(m *testing.M) {
	mcptest.MaybeServe() // the MCP server whose tools TestToolServers grants
	if rt := os.Getenv(stdioEnv); rt != "" {
		srv := mcpserver.New(mcpserver.Options{Config: sandboxes.Config{Options: local.Options{RuntimeDir: rt}, MaxLifetime: 10 * time.Minute}})
		err := srv.Run(context.Background(), &mcp.StdioTransport{})
		_ = srv.Close()
		if err != nil {
			os.Stderr.WriteString("mcp server: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func requireDeps(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sandboxestest.Require(t, exec.Command("/usr/bin/python3", "-c", "import numpy, matplotlib").Run() == nil,
		"the sandbox's /usr/bin/python3 needs numpy and matplotlib (make deps)")
}

func call(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// sandboxCount is how many sandboxes live in the runtime dir.
func sandboxCount(t *testing.T, rt string) int {
	t.Helper()
	list, err := sandboxes.List(context.Background(), sandboxes.Config{Options: local.Options{RuntimeDir: rt}}, sandboxes.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return len(list)
}

// exercise runs every tool through a real MCP client session.
func exercise(t *testing.T, ctx context.Context, cs *mcp.ClientSession, rt string) {
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "run_code") || !strings.Contains(got, "run_command") ||
		!strings.Contains(got, "read_file") || !strings.Contains(got, "write_file") || !strings.Contains(got, "list_contexts") || !strings.Contains(got, "reset_context") {
		t.Fatalf("tools: %s", got)
	}
	if n := sandboxCount(t, rt); n != 0 {
		t.Fatalf("%d sandboxes before the first tool call", n)
	}

	res := call(t, ctx, cs, "run_code", map[string]any{"code": "import matplotlib.pyplot as plt\nx = 21\nplt.plot([1, 4, 9]); plt.show()\nprint('plotted')\nx * 2"})
	if res.IsError || !strings.Contains(text(res), "plotted") || !strings.Contains(text(res), "42") {
		t.Fatalf("run_code: %v %q", res.IsError, text(res))
	}
	var png []byte
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok && ic.MIMEType == "image/png" {
			png = ic.Data
		}
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("run_code: no PNG image content in %d items", len(res.Content))
	}
	if n := sandboxCount(t, rt); n != 1 {
		t.Fatalf("%d sandboxes for one session", n)
	}
	res = call(t, ctx, cs, "run_code", map[string]any{"code": "1/0"})
	if !res.IsError || !strings.Contains(text(res), "ZeroDivisionError") {
		t.Errorf("failing code: %v %q", res.IsError, text(res))
	}

	res = call(t, ctx, cs, "write_file", map[string]any{"path": "/home/user/note.txt", "content": "hello from mcp"})
	if res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	res = call(t, ctx, cs, "run_command", map[string]any{"command": "cat /home/user/note.txt; echo oops >&2; exit 3"})
	if !res.IsError || !strings.Contains(text(res), "exit_code: 3") || !strings.Contains(text(res), "hello from mcp") || !strings.Contains(text(res), "oops") {
		t.Errorf("run_command: %v %q", res.IsError, text(res))
	}
	res = call(t, ctx, cs, "read_file", map[string]any{"path": "/home/user/note.txt"})
	if res.IsError || text(res) != "hello from mcp" {
		t.Errorf("read_file: %q", text(res))
	}
	res = call(t, ctx, cs, "read_file", map[string]any{"path": "/home/user/missing.txt"})
	if !res.IsError {
		t.Errorf("read_file of a missing file: %q", text(res))
	}

	res = call(t, ctx, cs, "list_contexts", nil)
	var ctxs []sandboxes.Context
	if err := json.Unmarshal([]byte(text(res)), &ctxs); err != nil || len(ctxs) == 0 {
		t.Fatalf("list_contexts: %q, %v", text(res), err)
	}
	res = call(t, ctx, cs, "reset_context", nil)
	if res.IsError {
		t.Fatalf("reset_context: %s", text(res))
	}
	res = call(t, ctx, cs, "run_code", map[string]any{"code": "x"})
	if !res.IsError || !strings.Contains(text(res), "NameError") {
		t.Errorf("x survived reset_context: %q", text(res))
	}
}

func waitNoSandboxes(t *testing.T, rt string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for sandboxCount(t, rt) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session's sandbox outlived the session")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestStreamableHTTP(t *testing.T) {
	requireDeps(t)
	rt := t.TempDir()
	srv := mcpserver.New(mcpserver.Options{Config: sandboxes.Config{Options: local.Options{RuntimeDir: rt}, MaxLifetime: 10 * time.Minute}})
	defer srv.Close()
	h, err := srv.HTTPHandler(mcpserver.HTTPOptions{Token: testToken, Idle: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	a, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: bearer(testToken)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, ctx, a, rt)

	// A second session has its own sandbox.
	b, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: bearer(testToken)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := call(t, ctx, b, "run_code", map[string]any{"code": "'x' in globals()"})
	if text(res) != "status: success\nFalse" {
		t.Errorf("the second session sees the first one's kernel: %q", text(res))
	}
	if n := sandboxCount(t, rt); n != 2 {
		t.Errorf("%d sandboxes for two sessions", n)
	}
	// Ending the sessions (DELETE) kills their sandboxes.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitNoSandboxes(t, rt)
}

func TestStdio(t *testing.T) {
	requireDeps(t)
	rt := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), stdioEnv+"="+rt)
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	// A loaded CI machine can take more than the SDK's default 5 s to kill
	// the session's sandbox on exit; don't let Close SIGTERM the server then.
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, ctx, cs, rt)
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("the server process: %v", cmd.ProcessState)
	}
	waitNoSandboxes(t, rt)
}

const testToken = "0123456789abcdef0123456789abcdef"

// bearer is an HTTP client that sends the token on every request.
func bearer(tok string) *http.Client {
	return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+tok)
		return http.DefaultTransport.RoundTrip(r)
	})}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestStreamableHTTPGuard: code execution is not served to whoever reaches
// the port, sessions are capped, and an idle session ends with its sandbox.
func TestStreamableHTTPGuard(t *testing.T) {
	requireDeps(t)
	rt := t.TempDir()
	srv := mcpserver.New(mcpserver.Options{Config: sandboxes.Config{Options: local.Options{RuntimeDir: rt}, MaxLifetime: 10 * time.Minute}})
	defer srv.Close()
	if _, err := srv.HTTPHandler(mcpserver.HTTPOptions{}); err == nil {
		t.Error("a handler without a token was made")
	}
	h, err := srv.HTTPHandler(mcpserver.HTTPOptions{Token: testToken, MaxSessions: 1, Idle: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	for _, hc := range []*http.Client{nil, bearer("wrong-token-wrong-token-wrong")} {
		if cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: hc}, nil); err == nil {
			cs.Close()
			t.Error("connected without the right token")
		}
	}
	req, _ := http.NewRequest("POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_code","arguments":{"code":"1"}}}`))
	req.Header.Set("Mcp-Session-Id", "guessed")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("a request with a session id but no token: %v %v", resp, err)
	}
	a, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: bearer(testToken)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	call(t, ctx, a, "run_code", map[string]any{"code": "1"})
	if cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: bearer(testToken)}, nil); err == nil {
		cs.Close()
		t.Error("a second session opened over the cap of 1")
	}
	// Left idle, the session ends and its sandbox is killed; then a new
	// session fits under the cap again.
	waitNoSandboxes(t, rt)
	b, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: bearer(testToken)}, nil)
	if err != nil {
		t.Fatalf("a session after the idle one ended: %v", err)
	}
	b.Close()
	_ = a
}

// TestToolServers is `code-sandboxes mcp --tool-server CMD --tool shout
// --tool word-count`: another MCP server (this test binary as a stdio
// child), its granted tools callable from run_code's code, the others not.
func TestToolServers(t *testing.T) {
	requireDeps(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Setenv(mcptest.ServeEnv, "1") // for the child only: TestMain already ran
	tools, closeTools, err := mcptools.FromServers(ctx, []string{os.Args[0]}, []string{"shout", "word-count"})
	if err != nil {
		t.Fatal(err)
	}
	defer closeTools()
	rt := t.TempDir()
	srv := mcpserver.New(mcpserver.Options{Config: sandboxes.Config{Options: local.Options{RuntimeDir: rt}}, Tools: tools})
	defer srv.Close()
	st, ct := mcp.NewInMemoryTransports()
	go func() { _ = srv.Run(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range list.Tools {
		if tl.Name == "run_code" && (!strings.Contains(tl.Description, "tools.shout(*, text: str)") || strings.Contains(tl.Description, "tools.fail")) {
			t.Errorf("run_code's description doesn't list exactly the granted tools:\n%s", tl.Description)
		}
	}
	res := call(t, ctx, cs, "run_code", map[string]any{"code": `import tools
print(tools.shout(text="hi"), tools.word_count(text="a b c"))
try:
    tools.call("fail")
except tools.ToolError as e:
    print("refused:", e)`})
	out := text(res)
	if res.IsError || !strings.Contains(out, "HI {'words': 3}") || !strings.Contains(out, `refused: tool "fail" is not granted`) {
		t.Errorf("run_code: %s", out)
	}
}
