// Command bench measures code-sandboxes against its peers in one run and
// writes BENCHMARKS.md. Ratios, not absolute times, are the point: every
// number in a table was measured on the same machine in the same run, ours
// interleaved with the peers'.
//
//	go run ./bench -n 20 -rtt 200 -idle 20 -scale 300 -o BENCHMARKS.md
//	go run ./bench -only local,pool,plots   # some sections (the report has only those)
//	go run ./bench -trace 20                # the cold start step by step
//	go run ./bench -ab /tmp/main-sb,/tmp/new-sb -n 30  # two sandbox binaries' cold starts, pair by pair
//	go run ./bench -ab /tmp/main-sb,/tmp/new-sb -ab-rtt -rtt 4000  # their warm round trips, block by block
//
// A section is a func(ctx, *strings.Builder) in its own file, listed once in
// main's sections; it records distributions for the plots in samples.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	_ "github.com/code-sandboxes/code-sandboxes/docker"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	_ "github.com/code-sandboxes/code-sandboxes/kubernetes"
)

var (
	nCold  = flag.Int("n", 20, "cold starts per measurement")
	nRTT   = flag.Int("rtt", 200, "round trips of x + 2")
	nIdle  = flag.Int("idle", 20, "sandboxes for the idle-memory measurement")
	nScale = flag.Int("scale", 1000, "sandboxes for the scale measurement (the issue's target: 1,000 alive)")
	out    = flag.String("o", "BENCHMARKS.md", "where to write the report")
	python = flag.String("python", "/usr/bin/python3", "python interpreter")
	only   = flag.String("only", "", "run only these sections (comma-separated: kernel, languages, local, pool, serve, codemode, memory, files, variants, templates, scale, network, gvisor, pause, plots)")
)

type stats struct {
	p50, p99, max, mean float64
	n                   int
}

// tail is the p99 with 100 samples or more, else the max (a "p99" of 20
// samples is just their largest but one).
func (s stats) tail() float64 {
	if s.n < 100 {
		return s.max
	}
	return s.p99
}

func (s stats) tailName() string { return tailName(s.n) }

func tailName(n int) string {
	if n < 100 {
		return "max"
	}
	return "p99"
}

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
	return stats{p50: pct(0.5), p99: pct(0.99), max: s[len(s)-1], mean: sum / float64(len(s)), n: len(s)}
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
	codeModeOnly(ctx) // with -codemode-only: prints the section and exits
	abOnly(ctx)       // with -ab: compares two sandbox binaries and exits
	if *traceN > 0 {
		check(traceColdStarts(ctx, os.Stdout, *traceN))
		return
	}
	if *onlyPool {
		poolBench(ctx, &rep)
		fmt.Print(rep.String())
		return
	}
	onlyTemplateBench(ctx, &rep) // -only-templates: this section alone, then exit
	if *onlyServe {
		rt, _ := os.MkdirTemp("", "cs-bench-")
		defer os.RemoveAll(rt)
		serveBench(ctx, &rep, sandboxes.Config{Options: local.Options{RuntimeDir: rt}})
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

	before := measureMachine()
	started := time.Now()
	rt, _ := os.MkdirTemp("", "cs-bench-")
	defer os.RemoveAll(rt)
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}

	// The sections, in order; each writes its own part of the report. A new
	// section is a func(ctx, *strings.Builder) in its own file and one line
	// here; -only runs some of them (the report then holds only those).
	type section struct {
		name string
		run  func(context.Context, *strings.Builder)
	}
	sections := []section{
		{"kernel", kernelBench},
		{"languages", languagesBench},
		{"local", localBench},
		{"pool", poolBench},
		{"serve", func(ctx context.Context, r *strings.Builder) { serveBench(ctx, r, cfg) }},
		{"codemode", func(ctx context.Context, r *strings.Builder) { codeModeBench(ctx, r, cfg) }},
		{"memory", memoryBench},
		// Scale before files, variants and templates: a thousand sandboxes
		// need ~14 GiB, and once free memory runs out every create pays the
		// kernel's reclaim. Those sections fill the page cache (the 2 GiB
		// file written and read back, images, template rootfs), which
		// would put the reclaim (and its slow creates) in the scale run's
		// last tenths for reasons of the bench's order, not of the sandboxes.
		{"scale", scaleBench},
		{"files", filesBench},
		{"variants", func(ctx context.Context, r *strings.Builder) { kubeBench(ctx, r, envBench(ctx, r)) }},
		{"templates", templateBench},
		{"network", netBench},
		{"gvisor", gvisorBench},
		{"pause", pauseBench},
		{"plots", plotsSection},
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	for n := range want {
		if !slices.ContainsFunc(sections, func(s section) bool { return s.name == n }) {
			check(fmt.Errorf("-only: unknown section %q", n))
		}
	}
	var body strings.Builder
	for _, s := range sections {
		if len(want) == 0 || want[s.name] {
			s.run(ctx, &body)
		}
	}

	after := measureMachine()
	host, _ := os.Hostname()
	fmt.Fprintf(&rep, "# Benchmarks\n\nMeasured by `make bench` (`go run ./bench`, see `bench/main.go`) on %s, %s UTC, in one run of %.0f s. ", host, started.UTC().Format("2006-01-02 15:04"), time.Since(started).Seconds())
	rep.WriteString("Every number in a table comes from the same run, peers measured beside ours (interleaved: ours, peer, ours, peer); the machines are shared and noisy, so read the ratios. Tails are p99 where a row has 100 samples or more, else the max.\n\n")
	writeMachine(&rep, before, after)
	rep.WriteString(body.String())
	fmt.Fprintf(&rep, "Reproduce: `make bench` (defaults: `-n %d -rtt %d -idle %d -scale %d`; `go run ./bench -scale 1000` for the issue's target).\n", *nCold, *nRTT, *nIdle, *nScale)
	check(os.WriteFile(*out, []byte(rep.String()), 0o644))
	fmt.Print(rep.String())
	if leanDir != "" {
		os.RemoveAll(leanDir)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// firstResult times Create → the result of 1 + 1 (ms) and closes the
// sandbox; what names the measurement in a failure.
func firstResult(ctx context.Context, cfg sandboxes.Config, what string) float64 {
	t := time.Now()
	sb, err := sandboxes.Create(ctx, cfg)
	check(err)
	ex, err := sb.RunCode(ctx, "1 + 1")
	check(err)
	if ex.Text() != "2" {
		check(fmt.Errorf("%s: got %q", what, ex.Text()))
	}
	ms := since(t)
	check(sb.Close())
	// A spare supervisor this Create had start (internal/local/spare.go)
	// starts outside the next measurement, which may be a peer's.
	local.WaitSpares()
	return ms
}
