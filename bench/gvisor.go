package main

// Isolation gvisor against namespaces on the local variant (issue 20), in
// the same run: cold start, the round trip of x + 2, a numpy workload and
// two loops that show where gVisor's cost is (system calls, not compute).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

var onlyGVisor = flag.Bool("gvisor-only", false, "only the gVisor section (isolation gvisor against namespaces), to stdout")

// The -gvisor-only run is handled here so that main keeps one call for the
// section; flags are package variables, defined before init runs.
func init() {
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-gvisor-only") || strings.HasPrefix(a, "--gvisor-only") {
			flag.Parse()
			if !*onlyGVisor {
				return
			}
			var rep strings.Builder
			gvisorBench(context.Background(), &rep)
			fmt.Print(rep.String())
			os.Exit(0)
		}
	}
}

// gvisorWorkloads are timed inside one sandbox of each level (p50 of
// *nCold runs each, after one warm-up).
var gvisorWorkloads = []struct{ name, code string }{
	{"numpy: 400×400 matmul ×10 + FFT of 2^20", "import numpy as np\na = np.random.rand(400, 400)\nfor _ in range(10): a = (a @ a) / a.sum()\nnp.fft.fft(np.random.rand(1 << 20)).real.sum() > 0"},
	{"pure Python loop (10^6 additions)", "s = 0\nfor i in range(1000000): s += i\ns"},
	{"10,000 small file writes (syscalls)", "import os\nfor i in range(10000):\n    with open('/tmp/f', 'w') as f: f.write('x')\nos.remove('/tmp/f')"},
}

func gvisorBench(ctx context.Context, rep *strings.Builder) {
	rep.WriteString("## gVisor against namespaces (issue 20)\n\n")
	if _, err := exec.LookPath("runsc"); err != nil || os.Geteuid() != 0 {
		rep.WriteString("Not measured: isolation gvisor on the local variant needs root and runsc (apt-get install runsc).\n\n")
		return
	}
	rt, err := os.MkdirTemp("", "cs-bench-gvisor-")
	check(err)
	defer os.RemoveAll(rt)
	type result struct {
		cold, rtt stats
		work      []stats
	}
	measure := func(iso sandboxes.Isolation) (result, error) {
		cfg := sandboxes.Config{Isolation: iso, Options: local.Options{RuntimeDir: rt}}
		var r result
		var cold []float64
		for i := 0; i < *nCold; i++ {
			t := time.Now()
			sb, err := sandboxes.Create(ctx, cfg)
			if err != nil {
				return r, err
			}
			ex, err := sb.RunCode(ctx, "1 + 1")
			if err == nil && ex.Text() != "2" {
				err = fmt.Errorf("cold create: got %q", ex.Text())
			}
			cold = append(cold, since(t))
			_ = sb.Close()
			if err != nil {
				return r, err
			}
		}
		r.cold = summarize(cold)
		r.rtt = summarize(runCodeRTT(ctx, cfg))
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			return r, err
		}
		defer sb.Close()
		for _, w := range gvisorWorkloads {
			var ms []float64
			for i := 0; i <= *nCold; i++ {
				t := time.Now()
				ex, err := sb.RunCode(ctx, w.code)
				if err == nil && ex.Error != nil {
					err = errors.New(ex.Error.Name + ": " + ex.Error.Value)
				}
				if err != nil {
					return r, fmt.Errorf("%s: %w", w.name, err)
				}
				if i > 0 { // the first run imports and warms up
					ms = append(ms, since(t))
				}
			}
			r.work = append(r.work, summarize(ms))
		}
		return r, nil
	}
	ns, err := measure(sandboxes.IsolationNamespaces)
	check(err)
	gv, err := measure(sandboxes.IsolationGVisor)
	if err != nil {
		fmt.Fprintf(rep, "gVisor not measured: %v\n\n", err)
		return
	}
	out, _ := exec.Command("runsc", "--version").Output()
	version, _, _ := strings.Cut(string(out), "\n")
	fmt.Fprintf(rep, "The same local sandbox (host python3, network none, default limits) under isolation namespaces and under isolation gvisor (%s, ptrace platform), one after the other in this run; p50 (p99) over %d cold starts, %d round trips, %d runs of each workload in one sandbox after a warm-up run.\n\n", strings.TrimSpace(version), *nCold, *nRTT, *nCold)
	rep.WriteString("| measurement | namespaces | gvisor | gvisor / namespaces |\n|---|---|---|---|\n")
	row := func(name string, a, b stats) {
		fmt.Fprintf(rep, "| %s | %.1f ms (%.1f) | %.1f ms (%.1f) | %.2f× |\n", name, a.p50, a.p99, b.p50, b.p99, b.p50/a.p50)
	}
	row("cold `Create` → first result of `1 + 1`", ns.cold, gv.cold)
	fmt.Fprintf(rep, "| round trip `x + 2` | %.2f ms (%.2f) | %.2f ms (%.2f) | %.2f× |\n", ns.rtt.p50, ns.rtt.p99, gv.rtt.p50, gv.rtt.p99, gv.rtt.p50/ns.rtt.p50)
	for i, w := range gvisorWorkloads {
		row(w.name, ns.work[i], gv.work[i])
	}
	rep.WriteString("\n")
}
