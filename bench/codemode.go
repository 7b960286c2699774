package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

var (
	onlyCodeMode = flag.Bool("codemode-only", false, "measure only the tool call round trip (code mode); print the section, leave -o alone")
	nTool        = flag.Int("tool-calls", 1000, "tool calls timed from sandbox code (code mode)")
)

// codeModeOnly is the -codemode-only run: the section alone, then exit.
func codeModeOnly(ctx context.Context) {
	if !*onlyCodeMode {
		return
	}
	rt, _ := os.MkdirTemp("", "cs-bench-")
	var rep strings.Builder
	codeModeBench(ctx, &rep, sandboxes.Config{Options: local.Options{RuntimeDir: rt}})
	os.RemoveAll(rt)
	fmt.Print(rep.String())
	os.Exit(0)
}

// codeModeBench measures, in one local sandbox with network none, the round
// trip of one tool call made by sandbox code (Python → agent's socket →
// host's Go function over the agent's stream → back), timed inside the
// sandbox, against the round trip of x + 2 timed by the host.
func codeModeBench(ctx context.Context, rep *strings.Builder, cfg sandboxes.Config) {
	cfg.Tools = []sandboxes.Tool{{Name: "echo", Description: "Returns its arguments.",
		Func: func(ctx context.Context, args json.RawMessage) (any, error) { return args, nil }}}
	sb, err := sandboxes.Create(ctx, cfg)
	check(err)
	defer sb.Close()
	_, err = sb.RunCode(ctx, "x = 40\nimport tools\ntools.echo(n=0)")
	check(err)
	var rtt []float64
	for i := 0; i < *nRTT; i++ {
		t := time.Now()
		_, err := sb.RunCode(ctx, "x + 2")
		check(err)
		rtt = append(rtt, since(t))
	}
	ex, err := sb.RunCode(ctx, fmt.Sprintf(`
import time, json
ms = []
for i in range(%d):
    t = time.perf_counter()
    tools.echo(n=i)
    ms.append((time.perf_counter() - t) * 1000)
print(json.dumps(ms))`, *nTool))
	check(err)
	if ex.Error != nil {
		check(fmt.Errorf("tool calls: %s: %s", ex.Error.Name, ex.Error.Value))
	}
	var calls []float64
	check(json.Unmarshal([]byte(ex.Stdout()), &calls))
	r, c := summarize(rtt), summarize(calls)
	rep.WriteString("## Code mode: a tool call from sandbox code\n\n")
	fmt.Fprintf(rep, "One local sandbox, network none. A tool call is timed inside the sandbox (`tools.echo(n=i)`: Python → the agent's unix socket → the host's Go function over the agent's stream → back), %d calls; `x + 2` is timed by the host (`RunCode`), %d round trips.\n\n", len(calls), len(rtt))
	rep.WriteString("| measurement | p50 | p99 | mean |\n|---|---|---|---|\n")
	fmt.Fprintf(rep, "| tool call round trip, from sandbox code | %.3f ms | %.3f ms | %.3f ms |\n", c.p50, c.p99, c.mean)
	fmt.Fprintf(rep, "| `x + 2` round trip, from the host | %.3f ms | %.3f ms | %.3f ms |\n", r.p50, r.p99, r.mean)
	fmt.Fprintf(rep, "| ratio (tool call / x + 2), p50 | %.2f× | | |\n\n", c.p50/r.p50)
}
