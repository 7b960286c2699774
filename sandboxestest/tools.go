package sandboxestest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
)

// RunTools runs the tools ("code mode") suite on the variant cfg selects:
// host functions granted to a sandbox and called from its Python code, with
// the attacks first (forged calls, flooding, giant arguments and results, a
// host that went away). cfg's network policy is left as given; the suite
// checks that the tools work whatever it is ("none" is the default).
func RunTools(t *testing.T, cfg sandboxes.Config) {
	t.Helper()
	var adds atomic.Int64
	var inFlight, maxInFlight atomic.Int64
	hungCancelled := make(chan struct{}, 16)
	type addIn struct {
		A int `json:"a" jsonschema:"the first term"`
		B int `json:"b" jsonschema:"the second term"`
	}
	add, err := sandboxes.NewTool("add", "Add two integers.", func(ctx context.Context, in addIn) (int, error) {
		adds.Add(1)
		return in.A + in.B, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tools = []sandboxes.Tool{add,
		{Name: "fail", Description: "Always fails.", Func: func(ctx context.Context, args json.RawMessage) (any, error) {
			return nil, errors.New("boom: user 42 not found")
		}},
		{Name: "echo", Description: "Returns its text.", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
			Func: func(ctx context.Context, args json.RawMessage) (any, error) {
				var in struct{ Text string }
				err := json.Unmarshal(args, &in)
				return map[string]any{"text": in.Text, "n": len(in.Text)}, err
			}},
		{Name: "anyargs", Description: "No schema: any keyword arguments, returned.", Func: func(ctx context.Context, args json.RawMessage) (any, error) {
			return args, nil
		}},
		{Name: "giant", Description: "Returns 5 MiB.", Func: func(ctx context.Context, args json.RawMessage) (any, error) {
			return strings.Repeat("x", 5<<20), nil
		}},
		{Name: "hang", Description: "Never answers.", Timeout: time.Second, Func: func(ctx context.Context, args json.RawMessage) (any, error) {
			<-ctx.Done()
			hungCancelled <- struct{}{}
			return nil, ctx.Err()
		}},
		{Name: "slow", Description: "Takes 300 ms.", Func: func(ctx context.Context, args json.RawMessage) (any, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := maxInFlight.Load()
				if n <= m || maxInFlight.CompareAndSwap(m, n) {
					break
				}
			}
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
			}
			return "ok", nil
		}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	defer sb.Close()

	py := func(t *testing.T, code string) string {
		t.Helper()
		ex := run(t, sb, code)
		if ex.Error != nil {
			t.Fatalf("%s\nraised %s: %s\n%s", code, ex.Error.Name, ex.Error.Value, ex.Error.Traceback)
		}
		return strings.TrimSpace(ex.Stdout())
	}

	t.Run("NamesRefused", func(t *testing.T) {
		noop := func(ctx context.Context, args json.RawMessage) (any, error) { return nil, nil }
		for _, name := range []string{"", "2fast", "has-dash", "class", "import", "_private", "ToolError", "a.b", strings.Repeat("x", 65), "naïve"} {
			err := sb.RegisterTool(ctxT(t, time.Minute), name, "", nil, noop)
			if !errors.Is(err, sandboxes.ErrInvalidInput) {
				t.Errorf("RegisterTool(%q) = %v, want ErrInvalidInput with the reason", name, err)
			}
		}
		if err := sb.RegisterTool(ctxT(t, time.Minute), "ok", "", json.RawMessage(`{"type":"string"}`), noop); !errors.Is(err, sandboxes.ErrInvalidInput) {
			t.Errorf("a non-object schema = %v, want ErrInvalidInput", err)
		}
	})

	t.Run("ForgedCallsToUngrantedTools", func(t *testing.T) {
		// Sandbox code speaks the socket protocol itself, bypassing the
		// module: a name the host never granted, the module's own names,
		// path tricks, a list request (harmless: the granted names only).
		out := py(t, `
import json, os, socket
def raw(req):
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["CODE_SANDBOXES_TOOLS_SOCKET"])
    s.sendall(req if isinstance(req, bytes) else json.dumps(req).encode() + b"\n")
    buf = b""
    while not buf.endswith(b"\n"):
        c = s.recv(65536)
        if not c: break
        buf += c
    s.close()
    return json.loads(buf) if buf else None
for name in ["secret", "../add", "add ", "ADD", "", "__import__"]:
    a = raw({"tool": name, "args": {}})
    assert a.get("kind") == "refused" and "not granted" in a["error"], (name, a)
a = raw({"tool": "add", "args": [1, 2]})
assert a.get("kind") == "refused", a
a = raw({"tool": "add", "args": {"a": "1", "b": 2}})  # the host checks the schema too
assert a.get("kind") == "tool" and "invalid arguments" in a["error"], a
a = raw(b"not json\n")
assert a.get("kind") == "refused", a
print(sorted(t["name"] for t in raw({"list": True})["tools"]))
`)
		if !strings.Contains(out, "'add', 'anyargs', 'echo', 'fail', 'giant', 'hang', 'slow'") {
			t.Errorf("listed %s", out)
		}
	})

	t.Run("NetworkNoneReachesOnlyTools", func(t *testing.T) {
		if cfg.NetworkPolicy != "" && cfg.NetworkPolicy != sandboxes.NetworkNone {
			t.Skipf("network %q", cfg.NetworkPolicy)
		}
		// A listener on each of the host's own addresses: the sandbox's code
		// reaches the tools (above and below) and none of these.
		addrs, err := testnet.HostAddrs()
		if err != nil || len(addrs) == 0 {
			t.Fatalf("host addresses: %v %v", addrs, err)
		}
		var targets []string
		for _, a := range addrs {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, "0"))
			if err != nil {
				continue
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			targets = append(targets, ln.Addr().String())
		}
		if len(targets) == 0 {
			t.Fatal("no host address to listen on")
		}
		js, _ := json.Marshal(targets)
		out := py(t, `
import socket, json, tools
reached = []
for hp in json.loads('`+string(js)+`'):
    h, p = hp.rsplit(":", 1)
    try:
        socket.create_connection((h.strip("[]"), int(p)), timeout=2).close()
        reached.append(hp)
    except OSError:
        pass
print("reached:", reached, "tool:", tools.add(a=1, b=2))
`)
		if out != "reached: [] tool: 3" {
			t.Errorf("with network none: %s", out)
		}
	})

	t.Run("Loop1000", func(t *testing.T) {
		before := adds.Load()
		out := py(t, "import tools\nprint(sum(tools.add(a=i, b=1) for i in range(1000)))")
		if out != "500500" {
			t.Errorf("sum = %q, want 500500", out)
		}
		if n := adds.Load() - before; n != 1000 {
			t.Errorf("the host ran add %d times, want 1000", n)
		}
	})

	t.Run("ModuleShape", func(t *testing.T) {
		out := py(t, `
import tools, inspect
print(tools.add.__doc__.splitlines()[0])
print(inspect.signature(tools.add))
print(tools.echo(text="héllo"))
print(issubclass(tools.ToolTimeout, TimeoutError), issubclass(tools.ToolError, Exception))
print(tools.anyargs(x=[1, None], y={"z": 1.5}), inspect.signature(tools.anyargs))
print(tools.call("anyargs", name="n"))
`)
		for _, want := range []string{"Add two integers.", "(*, a, b)", "{'n': 6, 'text': 'héllo'}", "True True", "{'x': [1, None], 'y': {'z': 1.5}} (**kwargs)", "{'name': 'n'}"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("SchemaCheckedInSandbox", func(t *testing.T) {
		before := adds.Load()
		out := py(t, `
import tools
for kw in [dict(a="x", b=1), dict(a=1), dict(a=1, b=2, c=3), dict(a=True, b=1)]:
    try:
        tools.add(**kw)
        print("accepted", kw)
    except TypeError as e:
        print("TypeError:", e)
try:
    tools.add(1, 2)
except TypeError as e:
    print("TypeError:", e)
`)
		if strings.Contains(out, "accepted") || strings.Count(out, "TypeError") != 5 {
			t.Errorf("bad calls not all refused:\n%s", out)
		}
		for _, want := range []string{"missing required argument 'b'", "unexpected argument 'c'", "must be integer, not str", "keyword arguments only"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if adds.Load() != before {
			t.Error("a refused call reached the host")
		}
	})

	t.Run("ToolErrorIsPythonException", func(t *testing.T) {
		ex := run(t, sb, "import tools\ntools.fail()")
		if ex.Error == nil || ex.Error.Name != "ToolError" || !strings.Contains(ex.Error.Value, "boom: user 42 not found") {
			t.Errorf("error = %+v, want ToolError carrying the tool's message", ex.Error)
		}
	})

	t.Run("OversizedArgumentsRefused", func(t *testing.T) {
		out := py(t, `
import tools, json, os, socket
try:
    tools.echo(text="x" * (2 << 20))
    print("accepted")
except ValueError as e:
    print("ValueError:", e)
# Bypassing the module: the agent refuses the line itself.
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["CODE_SANDBOXES_TOOLS_SOCKET"])
try:
    s.sendall(json.dumps({"tool": "echo", "args": {"text": "x" * (3 << 20)}}).encode() + b"\n")
except OSError as e:
    pass
buf = b""
while not buf.endswith(b"\n"):
    c = s.recv(65536)
    if not c: break
    buf += c
print(json.loads(buf))
`)
		if strings.Contains(out, "accepted") || !strings.Contains(out, "ValueError") || !strings.Contains(out, "over the limit") || !strings.Contains(out, "'kind': 'refused'") {
			t.Errorf("oversized arguments not refused:\n%s", out)
		}
	})

	t.Run("GiantResultRefused", func(t *testing.T) {
		ex := run(t, sb, "import tools\ntools.giant()")
		if ex.Error == nil || ex.Error.Name != "ToolError" || !strings.Contains(ex.Error.Value, "over the limit") {
			t.Errorf("error = %+v, want ToolError: over the limit", ex.Error)
		}
		if out := py(t, "import tools\nprint(tools.add(a=1, b=1))"); out != "2" {
			t.Errorf("after a giant result: %q", out)
		}
	})

	t.Run("HangTimesOut", func(t *testing.T) {
		out := py(t, `
import tools
try:
    tools.hang()
except TimeoutError as e:
    print(type(e).__name__, e)
`)
		if !strings.HasPrefix(out, "ToolTimeout") {
			t.Errorf("a hanging tool gave %q, want ToolTimeout (a TimeoutError)", out)
		}
		select {
		case <-hungCancelled:
		case <-time.After(30 * time.Second):
			t.Error("the hanging tool's ctx was not cancelled")
		}
	})

	t.Run("FloodBounded", func(t *testing.T) {
		ex := run(t, sb, `
import tools, threading
res = {"ok": 0, "refused": 0, "other": []}
lock = threading.Lock()
def one():
    try:
        tools.slow()
        k = "ok"
    except tools.ToolError as e:
        k = "refused" if "too many tool calls" in str(e) else None
        if k is None:
            with lock: res["other"].append(str(e))
            return
    with lock: res[k] += 1
ts = [threading.Thread(target=one) for _ in range(300)]
for t in ts: t.start()
for t in ts: t.join()
print(res["ok"], res["refused"], res["other"][:3])
print(tools.add(a=2, b=3))
`)
		out := strings.TrimSpace(ex.Stdout())
		var ok, refused int
		var rest string
		if _, err := fmt.Sscanf(out, "%d %d %s", &ok, &refused, &rest); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		if ok == 0 || ok+refused != 300 || !strings.HasSuffix(out, "\n5") || ex.Stderr() != "" {
			t.Errorf("flood: %s\n%s", out, ex.Stderr())
		}
		if m := maxInFlight.Load(); m > sandboxes.MaxToolCalls {
			t.Errorf("%d calls ran at once on the host, the bound is %d", m, sandboxes.MaxToolCalls)
		}
	})

	t.Run("RegrantDuringCall", func(t *testing.T) {
		// Granting more tools while a call is in progress replaces the
		// stream; the call still completes with its result.
		started, release := make(chan struct{}, 1), make(chan struct{})
		err := sb.RegisterTool(ctxT(t, time.Minute), "waiter", "", nil, func(ctx context.Context, args json.RawMessage) (any, error) {
			started <- struct{}{}
			select {
			case <-release:
				return "released", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		res := make(chan string, 1)
		go func() {
			ex, err := sb.RunCode(ctxT(t, time.Minute), "import tools\nprint(tools.waiter())")
			switch {
			case err != nil:
				res <- err.Error()
			case ex.Error != nil:
				res <- ex.Error.Name + ": " + ex.Error.Value
			default:
				res <- strings.TrimSpace(ex.Stdout())
			}
		}()
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the tool never started")
		}
		if err := sb.RegisterTool(ctxT(t, time.Minute), "later", "", nil, func(ctx context.Context, args json.RawMessage) (any, error) { return 7, nil }); err != nil {
			t.Fatal(err)
		}
		close(release)
		if got := <-res; got != "released" {
			t.Errorf("the call across a new grant gave %q", got)
		}
		if out := py(t, "import tools\nprint(tools.later(), tools.add(a=1, b=1))"); out != "7 2" {
			t.Errorf("after the new grant: %q", out)
		}
	})

	t.Run("HostGone", func(t *testing.T) {
		// A second handle takes over the tools, then goes away (Detach
		// ends its stream): calls fail at once with ToolUnavailable.
		other, err := sandboxes.Get(ctxT(t, time.Minute), cfg, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		if err := other.RegisterTools(ctxT(t, time.Minute), add); err != nil {
			t.Fatal(err)
		}
		if out := py(t, "import tools\nprint(tools.add(a=20, b=22))"); out != "42" {
			t.Errorf("through the second handle: %q", out)
		}
		if err := other.Detach(); err != nil {
			t.Fatal(err)
		}
		out := py(t, `
import tools
try:
    tools.add(a=1, b=2)
except tools.ToolUnavailable as e:
    print("unavailable:", e)
`)
		if !strings.HasPrefix(out, "unavailable:") {
			t.Errorf("call with the host gone: %q", out)
		}
		// The first handle grants again: calls work.
		if err := sb.RegisterTools(ctxT(t, time.Minute), add); err != nil {
			t.Fatal(err)
		}
		if out := py(t, "import tools\nprint(tools.add(a=1, b=2))"); out != "3" {
			t.Errorf("after granting again: %q", out)
		}
	})

	t.Run("CallsAfterClose", func(t *testing.T) {
		started := make(chan struct{}, 1)
		cancelled := make(chan struct{}, 1)
		err := sb.RegisterTool(ctxT(t, time.Minute), "block", "", nil, func(ctx context.Context, args json.RawMessage) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			cancelled <- struct{}{}
			return nil, ctx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = sb.RunCode(ctxT(t, time.Minute), "import tools\ntools.block()")
		}()
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the tool never started")
		}
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-cancelled:
		case <-time.After(30 * time.Second):
			t.Error("Close did not cancel the call in progress")
		}
		wg.Wait()
		if err := sb.RegisterTools(ctxT(t, time.Minute), add); !errors.Is(err, sandboxes.ErrClosed) {
			t.Errorf("RegisterTools after Close = %v, want ErrClosed", err)
		}
	})
}
