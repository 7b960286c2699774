// The kernel section: our kernel's round trips against Jupyter's, and the
// agent binary it runs.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
)

// kernelBench: python3 -c pass against the agent's new context → first
// result (no isolation), interleaved, and the round trip of x + 2, against
// a Jupyter kernel doing the same.
func kernelBench(ctx context.Context, rep *strings.Builder) {
	agentBin := buildAgent()
	var pyPass, firsts, rtts []float64
	for i := 0; i < *nCold; i++ {
		p, err := timeCmd(1, *python, "-c", "pass")
		check(err)
		pyPass = append(pyPass, p...)
		f, r := agentKernel(ctx, agentBin, i == 0)
		firsts = append(firsts, f)
		if i == 0 {
			rtts = r
		}
	}
	jup := jupyter()
	pp, ff, rr := summarize(pyPass), summarize(firsts), summarize(rtts)
	js, jr := jup.start, summarize(jup.rtt)
	rep.WriteString("## Kernel (issue 2)\n\n")
	rep.WriteString("Start a new context in a running agent (its default kernel warm, so the kernel's bytecode is cached) and get its first result (`1 + 1`), and the round trip of `x + 2`, through the agent over its unix socket (no isolation; executions over the lean connection our Go client uses, `/x/exec`), against a Jupyter kernel (`jupyter_client` + `ipykernel`) doing the same.\n\n")
	fmt.Fprintf(rep, "| measurement | ours p50 | ours %s | peer | peer p50 | ratio (ours/peer) |\n|---|---|---|---|---|---|\n", ff.tailName())
	fmt.Fprintf(rep, "| new context → first result | %.1f ms | %.1f ms | `python3 -c pass` | %.1f ms | %.2f× (target ≤ 1.5×) |\n", ff.p50, ff.tail(), pp.p50, ff.p50/pp.p50)
	fmt.Fprintf(rep, "| new context → first result | %.1f ms | %.1f ms | Jupyter kernel start → first result | %.1f ms | %.3f× |\n", ff.p50, ff.tail(), js, ff.p50/js)
	fmt.Fprintf(rep, "| round trip `x + 2` (%d) | %.2f ms | %.2f ms (%s) | Jupyter round trip | %.2f ms (%s %.2f) | %.3f× (target ≤ 0.1×) |\n\n", len(rtts), rr.p50, rr.tail(), rr.tailName(), jr.p50, jr.tailName(), jr.tail(), rr.p50/jr.p50)
	samples["python3 -c pass"] = pyPass
}

func buildAgent() string {
	dir, _ := os.MkdirTemp("", "cs-agent-")
	bin := filepath.Join(dir, "code-sandboxes-agent")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/code-sandboxes-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		check(fmt.Errorf("build agent: %v: %s", err, out))
	}
	return bin
}

// agentKernel starts an agent, measures new context → first result, and
// (when rtt) the round trips of x + 2.
func agentKernel(ctx context.Context, bin string, rtt bool) (float64, []float64) {
	dir, _ := os.MkdirTemp("", "cs-agent-run-")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	cmd := exec.Command(bin, "--listen", "unix:"+sock, "--workdir", dir, "--python", *python)
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}
	check(cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// The Go API's path: executions over the lean connection (/x/exec).
	c := client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: client.UnixHTTPClient(sock), Dial: client.UnixDial(sock)})
	for c.Health(ctx) != nil {
		time.Sleep(2 * time.Millisecond)
	}
	// A new context in a running agent: its default kernel started (and
	// with it the kernel's bytecode cached in this fresh HOME) before the
	// clock starts. Otherwise both kernels start at once with the agent
	// and compile the kernel's source: a cold host's first start, which
	// the local section measures whole.
	check(c.Warm(ctx))
	t := time.Now()
	cc, err := c.CreateContext(ctx, "python", "")
	check(err)
	text := ""
	check(c.Execute(ctx, client.ExecuteRequest{Code: "1 + 1", ContextID: cc.ID}, func(l client.Line) {
		if l.Type == "result" {
			_ = json.Unmarshal(l.Data["text"], &text)
		}
	}))
	first := since(t)
	if text != "2" {
		check(fmt.Errorf("agent first result %q", text))
	}
	if !rtt {
		return first, nil
	}
	check(c.Execute(ctx, client.ExecuteRequest{Code: "x = 40", ContextID: cc.ID}, func(client.Line) {}))
	var rtts []float64
	for i := 0; i < *nRTT; i++ {
		t := time.Now()
		check(c.Execute(ctx, client.ExecuteRequest{Code: "x + 2", ContextID: cc.ID}, func(client.Line) {}))
		rtts = append(rtts, since(t))
	}
	return first, rtts
}

type jupyterResult struct {
	start float64
	rtt   []float64
}

func jupyter() jupyterResult {
	cmd := exec.Command(*python, "bench/jupyter_baseline.py", strconv.Itoa(*nRTT))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		check(fmt.Errorf("jupyter baseline: %v: %s", err, stderr.String()))
	}
	var r struct {
		Start float64   `json:"start_first_result_ms"`
		RTT   []float64 `json:"rtt_ms"`
	}
	check(json.Unmarshal(b, &r))
	return jupyterResult{start: r.Start, rtt: r.RTT}
}
