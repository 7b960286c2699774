package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bauth"
	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem/filesystemconnect"
	processpb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/process/processconnect"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

var agentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agent-bin")
	if err != nil {
		panic(err)
	}
	agentBin = filepath.Join(dir, "code-sandboxes-agent")
	cmd := exec.Command("go", "build", "-o", agentBin, "../../cmd/code-sandboxes-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the agent: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type agentProc struct {
	sock, token, home string
	cmd               *exec.Cmd
	c                 *client.Client
	hc                *http.Client
}

func startAgent(t *testing.T, token string, extra ...string) *agentProc {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	_ = os.Mkdir(home, 0o755)
	sock := filepath.Join(dir, "agent.sock")
	args := append([]string{"--listen", "unix:" + sock, "--workdir", home, "--python", "/usr/bin/python3"}, extra...)
	cmd := exec.Command(agentBin, args...)
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "CODE_SANDBOXES_TOKEN=" + token, "MPLBACKEND=Agg"}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	hc := client.UnixHTTPClient(sock)
	a := &agentProc{sock: sock, token: token, home: home, cmd: cmd, hc: hc,
		c: client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: hc, AccessToken: token})}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := a.c.Health(context.Background()); err == nil {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatal("agent did not come up")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// raw posts to the agent and returns status and body.
func (a *agentProc) raw(t *testing.T, method, path, body string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://sandbox"+path, strings.NewReader(body))
	if a.token != "" {
		req.Header.Set("X-Access-Token", a.token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestExecuteWireFormat(t *testing.T) {
	a := startAgent(t, "")
	status, body, hdr := a.raw(t, "POST", "/execute", `{"code": "print('hi')\n'x' * 2"}`, map[string]string{"Content-Type": "application/json"})
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	if !strings.HasPrefix(hdr.Get("Content-Type"), "application/x-ndjson") {
		t.Errorf("content type %q", hdr.Get("Content-Type"))
	}
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	if lines[len(lines)-1] != `{"type": "end_of_execution"}` {
		t.Errorf("last line %q, want E2B's literal end line", lines[len(lines)-1])
	}
	if !strings.HasPrefix(lines[0], `{"type": "number_of_executions", "execution_count": 1}`) && !strings.Contains(lines[0], `"execution_count": 1`) {
		t.Errorf("first line %q", lines[0])
	}
	var sawStdout, sawResult bool
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		switch m["type"] {
		case "stdout":
			sawStdout = m["text"] == "hi\n" && m["timestamp"] != nil
		case "result":
			// E2B strips one pair of quotes from text/plain and always sends extra.
			sawResult = m["text"] == "xx" && m["is_main_result"] == true && m["extra"] != nil
		}
	}
	if !sawStdout || !sawResult {
		t.Errorf("stream lacks stdout or result: %s", body)
	}
}

func TestExecuteErrorsAndContexts(t *testing.T) {
	a := startAgent(t, "")
	if s, b, _ := a.raw(t, "POST", "/execute", `{"code": "1", "context_id": "x", "language": "python"}`, nil); s != 400 || b != "Only one of context_id or language can be provided" {
		t.Errorf("both: %d %q", s, b)
	}
	if s, b, _ := a.raw(t, "POST", "/execute", `{"code": "1", "context_id": "nope"}`, nil); s != 404 || b != "Context nope not found" {
		t.Errorf("unknown context: %d %q", s, b)
	}
	if s, _, _ := a.raw(t, "POST", "/execute", `{"code": `, nil); s != 400 {
		t.Errorf("malformed JSON: %d", s)
	}
	if s, b, _ := a.raw(t, "POST", "/execute", `{"code": "1", "language": "cobol"}`, nil); s != 400 || !strings.Contains(b, "cobol") {
		t.Errorf("unsupported language: %d %q", s, b)
	}
	big := `{"code": "` + strings.Repeat("x", 9<<20) + `"}`
	if s, _, _ := a.raw(t, "POST", "/execute", big, nil); s != 400 {
		t.Errorf("9 MiB code: %d", s)
	}
	c, err := a.c.CreateContext(ctx(t), "python", "")
	if err != nil || c.ID == "" || c.Cwd != a.home {
		t.Fatalf("create context = %+v, %v", c, err)
	}
	var lines []client.Line
	if err := a.c.Execute(ctx(t), client.ExecuteRequest{Code: "y = 5", ContextID: c.ID}, func(l client.Line) { lines = append(lines, l) }); err != nil {
		t.Fatal(err)
	}
	var got []client.Line
	_ = a.c.Execute(ctx(t), client.ExecuteRequest{Code: "y"}, func(l client.Line) { got = append(got, l) })
	if !hasError(got, "NameError") {
		t.Errorf("default context sees y: %+v", got)
	}
	list, _ := a.c.ListContexts(ctx(t))
	langs := map[string]int{}
	for _, c := range list {
		langs[c.Language]++
	}
	// The two python contexts, and (as E2B's) a default javascript one where node is installed.
	_, noNode := exec.LookPath("node")
	if langs["python"] != 2 || len(list) != 2+langs["javascript"] || (noNode == nil) != (langs["javascript"] == 1) {
		t.Errorf("contexts = %+v", list)
	}
	if err := a.c.RestartContext(ctx(t), c.ID); err != nil {
		t.Fatal(err)
	}
	got = nil
	_ = a.c.Execute(ctx(t), client.ExecuteRequest{Code: "y", ContextID: c.ID}, func(l client.Line) { got = append(got, l) })
	if !hasError(got, "NameError") {
		t.Errorf("restart kept state: %+v", got)
	}
	if err := a.c.DeleteContext(ctx(t), c.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.c.DeleteContext(ctx(t), c.ID); !errors.Is(err, sberr.ErrNotFound) {
		t.Errorf("delete twice = %v", err)
	}
	if s, _, _ := a.raw(t, "POST", "/contexts", `{"cwd": "/does/not/exist"}`, nil); s != 400 {
		t.Errorf("bad cwd: %d", s)
	}
}

func hasError(lines []client.Line, name string) bool {
	for _, l := range lines {
		if l.Type == "error" && l.Name == name {
			return true
		}
	}
	return false
}

func TestTokenRequired(t *testing.T) {
	a := startAgent(t, "s3cret")
	noTok := client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: a.hc})
	if err := noTok.Health(ctx(t)); err != nil {
		t.Errorf("health must be open: %v", err)
	}
	if _, err := noTok.ListContexts(ctx(t)); !errors.Is(err, sberr.ErrUnauthorized) {
		t.Errorf("no token: %v", err)
	}
	wrong := client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: a.hc, AccessToken: "nope"})
	if _, err := wrong.ReadFile(ctx(t), "/etc/hostname"); !errors.Is(err, sberr.ErrUnauthorized) {
		t.Errorf("wrong token on /files: %v", err)
	}
	pc := processconnect.NewProcessClient(a.hc, "http://sandbox")
	if _, err := pc.List(ctx(t), connect.NewRequest(&processpb.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("rpc without token: %v", err)
	}
	if _, err := a.c.ListContexts(ctx(t)); err != nil {
		t.Errorf("right token: %v", err)
	}
}

func TestVariablesInterruptInfo(t *testing.T) {
	a := startAgent(t, "")
	if err := a.c.SetVariable(ctx(t), "", "cfg", json.RawMessage(`{"n": 3}`)); err != nil {
		t.Fatal(err)
	}
	v, isRepr, err := a.c.GetVariable(ctx(t), "", "cfg")
	if err != nil || isRepr || string(v) != `{"n":3}` && string(v) != `{"n": 3}` {
		t.Fatalf("get = %s %v %v", v, isRepr, err)
	}
	_ = a.c.Execute(ctx(t), client.ExecuteRequest{Code: "import threading\nlk = threading.Lock()"}, func(client.Line) {})
	v, isRepr, err = a.c.GetVariable(ctx(t), "", "lk")
	if err != nil || !isRepr || !strings.Contains(string(v), "lock") {
		t.Errorf("repr fallback = %s %v %v", v, isRepr, err)
	}
	if _, _, err := a.c.GetVariable(ctx(t), "", "missing"); !errors.Is(err, sberr.ErrNotFound) {
		t.Errorf("missing = %v", err)
	}
	if _, _, err := a.c.GetVariable(ctx(t), "", "1bad name"); !errors.Is(err, sberr.ErrInvalidInput) {
		t.Errorf("invalid name = %v", err)
	}
	if s, _, _ := a.raw(t, "PUT", "/x/contexts/default/variables/z", `{not json`, nil); s != 400 {
		t.Errorf("set invalid JSON: %d", s)
	}

	done := make(chan []client.Line, 1)
	go func() {
		var got []client.Line
		_ = a.c.Execute(context.Background(), client.ExecuteRequest{Code: "import time\nwhile True: time.sleep(0.05)"}, func(l client.Line) { got = append(got, l) })
		done <- got
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := a.c.Interrupt(ctx(t), "")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing to interrupt")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case got := <-done:
		if !hasError(got, "KeyboardInterrupt") {
			t.Errorf("interrupted stream: %+v", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("interrupt did not end the execution")
	}
	info, err := a.c.SetTimeout(ctx(t), time.Hour)
	if err != nil || time.Until(info.EndAt) < 59*time.Minute {
		t.Errorf("timeout = %+v, %v", info, err)
	}
}

func TestLifetimeEndsAgent(t *testing.T) {
	a := startAgent(t, "", "--lifetime", "1s")
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("agent outlived its lifetime")
	}
}

func TestFilesAndFilesystem(t *testing.T) {
	a := startAgent(t, "tok")
	p := filepath.Join(a.home, "d", "f.txt")
	if err := a.c.WriteFile(ctx(t), p, strings.NewReader("content")); err != nil {
		t.Fatal(err)
	}
	r, err := a.c.ReadFile(ctx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "content" {
		t.Fatalf("read %q", b)
	}
	if _, err := a.c.ReadFile(ctx(t), filepath.Join(a.home, "missing")); !errors.Is(err, sberr.ErrNotFound) {
		t.Errorf("missing file: %v", err)
	}
	fc := filesystemconnect.NewFilesystemClient(a.hc, "http://sandbox", connect.WithProtoJSON(), connect.WithInterceptors(tokenInterceptor("tok")))
	resp, err := fc.ListDir(ctx(t), connect.NewRequest(&fspb.ListDirRequest{Path: a.home, Depth: 2}))
	if err != nil || len(resp.Msg.GetEntries()) != 2 {
		t.Fatalf("listdir = %v, %v", resp, err)
	}
}

func TestProcessOverAgent(t *testing.T) {
	a := startAgent(t, "tok")
	pc := processconnect.NewProcessClient(a.hc, "http://sandbox", connect.WithInterceptors(tokenInterceptor("tok")))
	stream, err := pc.Start(ctx(t), connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo $HOME; exit 3"}}}))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var end *processpb.ProcessEvent_EndEvent
	first := true
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if first && ev.GetStart() == nil {
			t.Fatal("first event is not start")
		}
		first = false
		out.Write(ev.GetData().GetStdout())
		if e := ev.GetEnd(); e != nil {
			end = e
		}
	}
	if end == nil || end.GetExitCode() != 3 || strings.TrimSpace(out.String()) != a.home {
		t.Fatalf("end = %v, out %q, err %v", end, out.String(), stream.Err())
	}
}

func TestForward(t *testing.T) {
	a := startAgent(t, "tok")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = c.Write([]byte("echo:" + line))
		c.Close()
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	conn, err := a.c.DialPort(ctx(t), port)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = conn.Write([]byte("ping\n"))
	b, _ := io.ReadAll(conn)
	conn.Close()
	if string(b) != "echo:ping\n" {
		t.Fatalf("forwarded = %q", b)
	}
	// A closed port answers 502 with the reason.
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln2.Addr().(*net.TCPAddr).Port
	ln2.Close()
	if _, err := a.c.DialPort(ctx(t), closed); !errors.Is(err, sberr.ErrUnavailable) {
		t.Errorf("closed port: %v", err)
	}
}

type tokenInterceptor string

func (t tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("X-Access-Token", string(t))
		return next(ctx, req)
	}
}
func (t tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, s connect.Spec) connect.StreamingClientConn {
		c := next(ctx, s)
		c.RequestHeader().Set("X-Access-Token", string(t))
		return c
	}
}
func (t tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// TestDisconnectInterrupts: a client that goes away interrupts its own
// execution (the context stays usable, state kept), and only its own.
func TestDisconnectInterrupts(t *testing.T) {
	a := startAgent(t, "")
	_ = a.c.Execute(ctx(t), client.ExecuteRequest{Code: "kept = 1"}, func(client.Line) {})
	cctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() {
		_ = a.c.Execute(cctx, client.ExecuteRequest{Code: "import time\nprint('go', flush=True)\nwhile True: time.sleep(0.05)"}, func(l client.Line) {
			if l.Type == "stdout" {
				close(started)
			}
		})
	}()
	<-started
	cancel()
	for i := 0; i < 20; i++ {
		var text string
		err := a.c.Execute(ctx(t), client.ExecuteRequest{Code: "kept + 1"}, func(l client.Line) {
			if l.Type == "result" {
				_ = json.Unmarshal(l.Data["text"], &text)
			}
			if l.Type == "error" {
				t.Errorf("execution %d after the disconnect got %s: %s", i, l.Name, l.Value)
			}
		})
		if err != nil || text != "2" {
			t.Fatalf("execution %d: %q %v", i, text, err)
		}
	}
}

// An idle timeout ends the agent after that long without use; a running
// execution is use however long it runs, and health probes are not.
func TestIdleTimeoutEndsAgent(t *testing.T) {
	a := startAgent(t, "tok", "--idle-timeout", "2s")
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	// 4 s of execution: twice the idle timeout, yet in use throughout.
	var out strings.Builder
	err := a.c.Execute(ctx(t), client.ExecuteRequest{Code: "import time; time.sleep(4); print('slept')"}, func(l client.Line) { out.WriteString(l.Text) })
	if err != nil || !strings.Contains(out.String(), "slept") {
		t.Fatalf("a long execution under an idle timeout: %q, %v", out.String(), err)
	}
	select {
	case <-done:
		t.Fatal("the agent ended during or right after an execution longer than its idle timeout")
	default:
	}
	// Now idle: health probes every 100 ms must not keep it alive.
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatal("the agent outlived its idle timeout")
		case <-tick.C:
			_ = a.c.Health(context.Background())
		}
	}
}

// TestTokenAlternatives: the agent itself accepts, as envd does, a /files
// URL signed with its token and the traffic token on /contexts, and
// nothing else without the token, so a proxy in front never adds it.
func TestTokenAlternatives(t *testing.T) {
	a := startAgent(t, "s3cret")
	if err := os.WriteFile(filepath.Join(a.home, "f.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(a.home, "f.txt")
	do := func(method, target string, hdr map[string]string) int {
		req, _ := http.NewRequestWithContext(ctx(t), method, "http://sandbox"+target, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := a.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	signed := func(path, op, token string, exp int64) string {
		q := url.Values{"path": {path}, "signature": {e2bauth.FileSignature(path, op, "", token, exp)}}
		if exp != 0 {
			q.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		return "/files?" + q.Encode()
	}
	for _, c := range []struct {
		name, method, target string
		hdr                  map[string]string
		want                 int
	}{
		{"signed read", "GET", signed(path, "read", "s3cret", 0), nil, 200},
		{"signed read, not expired", "GET", signed(path, "read", "s3cret", time.Now().Unix()+60), nil, 200},
		{"signed read, expired", "GET", signed(path, "read", "s3cret", time.Now().Unix()-1), nil, 401},
		{"read signed with another token", "GET", signed(path, "read", "other", 0), nil, 401},
		{"write signature used to read", "GET", signed(path, "write", "s3cret", 0), nil, 401},
		{"unsigned read", "GET", "/files?path=" + url.QueryEscape(path), nil, 401},
		{"traffic token on /contexts", "GET", "/contexts", map[string]string{e2bauth.TrafficHeader: e2bauth.TrafficToken("s3cret")}, 200},
		{"another sandbox's traffic token", "GET", "/contexts", map[string]string{e2bauth.TrafficHeader: e2bauth.TrafficToken("other")}, 401},
		{"traffic token on /execute", "POST", "/execute", map[string]string{e2bauth.TrafficHeader: e2bauth.TrafficToken("s3cret")}, 401},
		{"traffic token on envd", "POST", "/process.Process/List", map[string]string{e2bauth.TrafficHeader: e2bauth.TrafficToken("s3cret")}, 401},
		{"signature on /contexts", "GET", "/contexts?signature=" + url.QueryEscape(e2bauth.FileSignature("", "read", "", "s3cret", 0)), nil, 401},
		// A URL signed for the default user stays the default user's,
		// whatever user an added Authorization header names (before: the
		// header chose the user, root included).
		{"signed read, a user added by header", "GET", signed(path, "read", "s3cret", 0), map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("nosuchuser:"))}, 200},
	} {
		if got := do(c.method, c.target, c.hdr); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// /execute answers its headers before the cell produces anything (and before
// the first keepalive, 5 s): a sandbox killed mid-run must look to the SDK
// like a response cut off, not a request that never answered.
func TestExecuteHeadersAtOnce(t *testing.T) {
	a := startAgent(t, "")
	gate := filepath.Join(t.TempDir(), "gate")
	code := fmt.Sprintf("import os, time\nwhile not os.path.exists(%q): time.sleep(0.02)\n'done'", gate)
	body, _ := json.Marshal(map[string]string{"code": code})
	req, _ := http.NewRequest("POST", "http://sandbox/execute", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	got := make(chan *http.Response, 1)
	go func() {
		resp, err := a.hc.Do(req)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- resp
	}()
	var resp *http.Response
	select {
	case resp = <-got:
	case <-time.After(4 * time.Second):
		os.WriteFile(gate, nil, 0o644)
		t.Fatal("no response headers while the cell runs")
	}
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	os.WriteFile(gate, nil, 0o644)
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `"done"`) || !strings.Contains(string(b), "end_of_execution") {
		t.Fatalf("body %s", b)
	}
}

// envd's signed /files URLs: the signature replaces the token for that path,
// operation and user, until it expires.
func TestSignedFileURLs(t *testing.T) {
	a := startAgent(t, "tok-secret")
	if s, _, _ := a.raw(t, "POST", "/files?path=signed.txt", "hello", map[string]string{"Content-Type": "application/octet-stream"}); s != 200 {
		t.Fatalf("upload with the token: %d", s)
	}
	do := func(method, q, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://sandbox/files?"+q, strings.NewReader(body))
		if method == "POST" {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		resp, err := a.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	sign := func(path, op, user, exp string) string {
		q := url.Values{"path": {path}, "signature": {sdkSignature(path, op, user, "tok-secret", exp)}}
		if user != "" {
			q.Set("username", user)
		}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		return q.Encode()
	}
	future := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	if s, b := do("GET", sign("signed.txt", "read", "", ""), ""); s != 200 || b != "hello" {
		t.Fatalf("signed read: %d %q", s, b)
	}
	if s, b := do("GET", sign("signed.txt", "read", "user", future), ""); s != 200 || b != "hello" {
		t.Fatalf("signed read with expiry and user: %d %q", s, b)
	}
	if s, b := do("POST", sign("up.txt", "write", "", future), "up"); s != 200 {
		t.Fatalf("signed write: %d %q", s, b)
	}
	for name, q := range map[string]string{
		"expired":             sign("signed.txt", "read", "", past),
		"write signature":     sign("signed.txt", "write", "", ""),
		"other path":          strings.Replace(sign("other.txt", "read", "", ""), "other.txt", "signed.txt", 1),
		"other token":         url.Values{"path": {"signed.txt"}, "signature": {sdkSignature("signed.txt", "read", "", "guess", "")}}.Encode(),
		"expiry edited":       strings.Replace(sign("signed.txt", "read", "", past), past, future, 1),
		"no signature at all": "path=signed.txt",
	} {
		s, b := do("GET", q, "")
		if s != 401 {
			t.Errorf("%s: %d %q, want 401", name, s, b)
		}
		if name == "expired" && !strings.Contains(b, "signature is already expired") {
			t.Errorf("expired: %q", b)
		}
	}
	// A signature opens /files only.
	req, _ := http.NewRequest("GET", "http://sandbox/contexts?"+sign("signed.txt", "read", "", ""), nil)
	if resp, err := a.hc.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("signature on /contexts: %v %v", resp.StatusCode, err)
	}
}

// sdkSignature is the E2B JS SDK's getSignature, written out independently.
func sdkSignature(path, op, user, token, exp string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != "" {
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// The default contexts list first, so a context just created is the last
// one listed (E2B's SDK tests rely on it).
func TestCreatedContextListsLast(t *testing.T) {
	a := startAgent(t, "")
	c, err := a.c.CreateContext(ctx(t), "python", "")
	if err != nil {
		t.Fatal(err)
	}
	list, err := a.c.ListContexts(ctx(t))
	if err != nil || len(list) < 2 || list[len(list)-1].ID != c.ID || list[0].Language != "python" {
		t.Fatalf("contexts = %+v (%v), want the default python first and %s last", list, err, c.ID)
	}
}
