// Command bench measures code-sandboxes against its peers in one run and
// writes BENCHMARKS.md. Ratios, not absolute times, are the point: every
// number in a table was measured on the same machine in the same run.
//
//	go run ./bench -n 20 -rtt 200 -idle 20 -scale 100 -o BENCHMARKS.md
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	_ "github.com/code-sandboxes/code-sandboxes/docker"
	"github.com/code-sandboxes/code-sandboxes/internal/client"
	_ "github.com/code-sandboxes/code-sandboxes/kubernetes"
)

var (
	nCold  = flag.Int("n", 20, "cold starts per measurement")
	nRTT   = flag.Int("rtt", 200, "round trips of x + 2")
	nIdle  = flag.Int("idle", 20, "sandboxes for the idle-memory measurement")
	nScale = flag.Int("scale", 100, "sandboxes for the scale measurement (500 for the issue's target)")
	out    = flag.String("o", "BENCHMARKS.md", "where to write the report")
	python = flag.String("python", "/usr/bin/python3", "python interpreter")
)

type stats struct{ p50, p99, mean float64 }

func summarize(ms []float64) stats {
	if len(ms) == 0 {
		return stats{}
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	pct := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return stats{p50: pct(0.5), p99: pct(0.99), mean: sum / float64(len(s))}
}

func timeCmd(n int, name string, args ...string) ([]float64, error) {
	var ms []float64
	for i := 0; i < n; i++ {
		t := time.Now()
		cmd := exec.Command(name, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s: %v: %s", name, err, stderr.String())
		}
		ms = append(ms, float64(time.Since(t).Microseconds())/1000)
	}
	return ms, nil
}

func since(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

func main() {
	flag.Parse()
	ctx := context.Background()
	var rep strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&rep, "# Benchmarks\n\nMeasured by `go run ./bench` (see `bench/main.go`) on %s, %d cores, %s, %s. ", host, runtime.NumCPU(), runtime.GOOS, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	rep.WriteString("Every number in a table comes from the same run; the machines are shared and noisy, so read the ratios.\n\n")

	if *onlyServe {
		rt, _ := os.MkdirTemp("", "cs-bench-")
		defer os.RemoveAll(rt)
		serveBench(ctx, &rep, sandboxes.Config{Local: sandboxes.LocalConfig{RuntimeDir: rt}})
		fmt.Print(rep.String())
		return
	}
	if *onlyNetwork {
		netBench(ctx, &rep)
		check(os.WriteFile(*out, []byte(rep.String()), 0o644))
		fmt.Print(rep.String())
		return
	}
	if *onlyEnv {
		// The environment, docker and kubernetes sections alone (a shorter
		// run; the report holds only them).
		kubeBench(ctx, &rep, envBench(ctx, &rep))
		check(os.WriteFile(*out, []byte(rep.String()), 0o644))
		fmt.Print(rep.String())
		return
	}

	// 1. Kernel: python3 -c pass vs our agent's first result vs Jupyter.
	pyPass, err := timeCmd(*nCold, *python, "-c", "pass")
	check(err)
	agentBin := buildAgent()
	var firsts, rtts []float64
	for i := 0; i < *nCold; i++ {
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
	rep.WriteString("Start a context and get its first result (`1 + 1`), and the round trip of `x + 2`, through the agent over its unix socket (no isolation), against a Jupyter kernel (`jupyter_client` + `ipykernel`) doing the same.\n\n")
	rep.WriteString("| measurement | ours p50 | ours p99 | peer | peer p50 | ratio (ours/peer) |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(&rep, "| new context → first result | %.1f ms | %.1f ms | `python3 -c pass` | %.1f ms | %.2f× (target ≤ 1.5×) |\n", ff.p50, ff.p99, pp.p50, ff.p50/pp.p50)
	fmt.Fprintf(&rep, "| new context → first result | %.1f ms | %.1f ms | Jupyter kernel start → first result | %.1f ms | %.3f× |\n", ff.p50, ff.p99, js, ff.p50/js)
	fmt.Fprintf(&rep, "| round trip `x + 2` (%d) | %.2f ms | %.2f ms | Jupyter round trip | %.2f ms (p99 %.2f) | %.3f× (target ≤ 0.1×) |\n\n", len(rtts), rr.p50, rr.p99, jr.p50, jr.p99, rr.p50/jr.p50)

	// 2. Local sandboxes: cold Create → first result vs bwrap and docker.
	rt, _ := os.MkdirTemp("", "cs-bench-")
	defer os.RemoveAll(rt)
	cfg := sandboxes.Config{Local: sandboxes.LocalConfig{RuntimeDir: rt}}
	var cold []float64
	for i := 0; i < *nCold; i++ {
		t := time.Now()
		sb, err := sandboxes.Create(ctx, cfg)
		check(err)
		ex, err := sb.RunCode(ctx, "1 + 1")
		check(err)
		if ex.Text() != "2" {
			check(fmt.Errorf("cold create: got %q", ex.Text()))
		}
		cold = append(cold, since(t))
		check(sb.Close())
	}
	var createOnly []float64
	for i := 0; i < *nCold; i++ {
		t := time.Now()
		sb, err := sandboxes.Create(ctx, cfg)
		check(err)
		createOnly = append(createOnly, since(t))
		check(sb.Close())
	}
	bw, bwErr := timeCmd(*nCold, "bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--symlink", "usr/bin", "/bin", "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--unshare-all", "--die-with-parent", "--uid", "1000", "--gid", "100", *python, "-c", "pass")
	cs, co, bs := summarize(cold), summarize(createOnly), summarize(bw)
	rep.WriteString("## Local sandboxes (issue 3)\n\n")
	rep.WriteString("| measurement | p50 | p99 | ratio to bwrap p50 |\n|---|---|---|---|\n")
	if bwErr == nil {
		fmt.Fprintf(&rep, "| `bwrap --unshare-all … python3 -c pass` (peer) | %.1f ms | %.1f ms | 1× |\n", bs.p50, bs.p99)
	} else {
		fmt.Fprintf(&rep, "| bwrap baseline | not measured: %v | | |\n", bwErr)
		bs.p50 = 0
	}
	ratio := func(v float64) string {
		if bs.p50 == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", v/bs.p50)
	}
	fmt.Fprintf(&rep, "| `Create` (sandbox answers) | %.1f ms | %.1f ms | %s |\n", co.p50, co.p99, ratio(co.p50))
	fmt.Fprintf(&rep, "| cold `Create` → first result of `1 + 1` | %.1f ms | %.1f ms | %s (target p50 ≤ 30 ms and ≤ 2×) |\n", cs.p50, cs.p99, ratio(cs.p50))
	rep.WriteString("| `docker run` | see the docker variant's section below | | |\n")
	rep.WriteString("\n")

	// 2b. What serve adds: routing cost and tunnel throughput.
	serveBench(ctx, &rep, cfg)

	// 3. Memory per idle sandbox.
	var sbs []*sandboxes.Sandbox
	for i := 0; i < *nIdle; i++ {
		sb, err := sandboxes.Create(ctx, cfg)
		check(err)
		sbs = append(sbs, sb)
	}
	memNoKernel := idleMemory(rt)
	for _, sb := range sbs {
		_, err := sb.RunCode(ctx, "x = 1")
		check(err)
	}
	time.Sleep(500 * time.Millisecond)
	memKernel := idleMemory(rt)
	for _, sb := range sbs {
		_ = sb.Close()
	}
	rep.WriteString("## Memory per idle sandbox\n\n")
	fmt.Fprintf(&rep, "%d idle sandboxes; proportional set size (PSS, shared pages split between sharers) of the supervisor, the agent and the kernel, from `/proc/<pid>/smaps_rollup`.\n\n", *nIdle)
	rep.WriteString("| state | PSS per sandbox | target |\n|---|---|---|\n")
	fmt.Fprintf(&rep, "| created, no code run (shim + agent + the prewarmed default kernel) | %.1f MiB | |\n", memNoKernel/float64(*nIdle))
	fmt.Fprintf(&rep, "| after one execution (shim + agent + python kernel) | %.1f MiB | ≤ 20 MiB |\n\n", memKernel/float64(*nIdle))

	// 4. Environments, and the docker variant against local.
	localEnvP50 := envBench(ctx, &rep)
	kubeBench(ctx, &rep, localEnvP50)

	// 5. Scale: create time while N sandboxes are alive.
	rep.WriteString("## Scale\n\n")
	fmt.Fprintf(&rep, "Create %d sandboxes and keep them; create time of each tenth (p50 over its ten).\n\n| alive | create p50 |\n|---|---|\n", *nScale)
	var alive []*sandboxes.Sandbox
	var window []float64
	for i := 1; i <= *nScale; i++ {
		t := time.Now()
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			fmt.Fprintf(&rep, "| %d | failed: %v |\n", i, err)
			break
		}
		window = append(window, since(t))
		alive = append(alive, sb)
		if i%(max(1, *nScale/10)) == 0 {
			fmt.Fprintf(&rep, "| %d | %.1f ms |\n", i, summarize(window).p50)
			window = nil
		}
	}
	for _, sb := range alive {
		_ = sb.Close()
	}
	rep.WriteString("\n")
	netBench(ctx, &rep)
	gvisorBench(ctx, &rep)
	pauseBench(ctx, &rep)
	rep.WriteString("Reproduce: `make bench` (defaults above), or `go run ./bench -scale 500` for the 500-sandbox target.\n")
	check(os.WriteFile(*out, []byte(rep.String()), 0o644))
	fmt.Print(rep.String())
}

// runCodeRTT creates one sandbox and times RunCode("x + 2") round trips.
func runCodeRTT(ctx context.Context, cfg sandboxes.Config) []float64 {
	sb, err := sandboxes.Create(ctx, cfg)
	check(err)
	defer sb.Close()
	_, err = sb.RunCode(ctx, "x = 40")
	check(err)
	var ms []float64
	for i := 0; i < *nRTT; i++ {
		t := time.Now()
		ex, err := sb.RunCode(ctx, "x + 2")
		check(err)
		if ex.Text() != "42" {
			check(fmt.Errorf("round trip: got %q", ex.Text()))
		}
		ms = append(ms, since(t))
	}
	return ms
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
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
	c := client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: client.UnixHTTPClient(sock)})
	for c.Health(ctx) != nil {
		time.Sleep(2 * time.Millisecond)
	}
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

// idleMemory sums the PSS (MiB) of every process of every sandbox in rt: the
// shim (from its record), and everything in its process tree.
func idleMemory(rt string) float64 {
	ents, _ := os.ReadDir(rt)
	total := 0.0
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(rt, e.Name(), "state.json"))
		if err != nil {
			continue
		}
		var r struct {
			ShimPid int `json:"shim_pid"`
		}
		_ = json.Unmarshal(b, &r)
		for _, pid := range tree(r.ShimPid) {
			total += pss(pid)
		}
	}
	return total / 1024
}

func tree(root int) []int {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		// children is per thread: a Go parent forks from any of its threads.
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if p, err := strconv.Atoi(f); err == nil {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// pss returns a process's proportional set size in KiB.
func pss(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Pss:") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}
