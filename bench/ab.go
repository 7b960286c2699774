package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

var abBins = flag.String("ab", "", "A/B two sandbox binaries (comma-separated absolute paths, e.g. one built from main and one from a branch): -n pairs of cold Create -> first result, alternating A B / B A, printed with each one's median timeline (-ab-trace), then exit")

var abEnvB = flag.String("ab-b-env", "", "with -ab: KEY=VALUE set in this program's environment for B's starts only (e.g. CODE_SANDBOXES_EARLY_KERNEL=1, with the same binary as A and B)")

var abNoRootB = flag.Bool("ab-b-noroot", false, "with -ab: B's sandboxes without the root user (local.Options.NoRootUser), e.g. to see what the root user costs with the same binary as A and B")

var abRTT = flag.Bool("ab-rtt", false, "with -ab: instead of cold starts, one warm sandbox of each binary and -rtt round trips of x + 2 on each, in alternating blocks of 100 (A B / B A), with the sandbox's CPU and thread wake-ups per round trip (the wake-ups don't move with the machine's load or a VM's stolen time)")

var abTrace = flag.Bool("ab-trace", true, "with -ab: trace every start and print each binary's median timeline")

// abOnly compares two sandbox binaries' cold start in one run, sample by
// sample (the machine's load drifts; pairs see the same load), when -ab is
// set, and exits.
func abOnly(ctx context.Context) {
	if *abBins == "" {
		return
	}
	bins := strings.Split(*abBins, ",")
	if len(bins) != 2 {
		check(fmt.Errorf("-ab wants two binaries, got %q", *abBins))
	}
	dir, err := os.MkdirTemp("", "cs-ab-")
	check(err)
	defer os.RemoveAll(dir)
	rt := filepath.Join(dir, "rt")
	if *abRTT {
		abRoundTrips(ctx, bins, rt)
		os.RemoveAll(dir)
		os.Exit(0)
	}
	traces := map[int][]string{}
	k := 0
	once := func(i int) float64 {
		if *abTrace {
			k++
			p := filepath.Join(dir, fmt.Sprintf("trace-%d", k))
			os.Setenv(trace.Env, p)
			trace.Reopen()
			traces[i] = append(traces[i], p)
		}
		cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt, SandboxBinary: bins[i], NoRootUser: *abNoRootB && i == 1}}
		if k, v, ok := strings.Cut(*abEnvB, "="); ok {
			if i == 1 {
				os.Setenv(k, v)
				defer os.Unsetenv(k)
			} else {
				os.Unsetenv(k)
			}
		}
		t := time.Now()
		sb, err := sandboxes.Create(ctx, cfg)
		check(err)
		ex, err := sb.RunCode(ctx, "1 + 1")
		check(err)
		ms := since(t)
		trace.Mark("caller: first result")
		if ex.Text() != "2" {
			check(fmt.Errorf("ab: got %q", ex.Text()))
		}
		check(sb.Close())
		local.WaitSpares() // outside the next start (spare.go)
		return ms
	}
	// A warm-up of each (fingerprint checks, page cache), not counted.
	once(0)
	once(1)
	traces = map[int][]string{}
	var a, b, d []float64
	for i := 0; i < *nCold; i++ {
		var x, y float64
		if i%2 == 0 {
			x = once(0)
			y = once(1)
		} else {
			y = once(1)
			x = once(0)
		}
		a, b, d = append(a, x), append(b, y), append(d, y-x)
	}
	os.Unsetenv(trace.Env)
	trace.Reopen()
	if *abTrace {
		for i, bin := range bins {
			fmt.Printf("%s: median timeline\n", bin)
			at := map[string][]float64{}
			for _, p := range traces[i] {
				steps, err := readTrace(p)
				check(err)
				for s, v := range steps {
					at[s] = append(at[s], v)
				}
			}
			type row struct {
				step string
				med  float64
			}
			var rows []row
			for s, v := range at {
				rows = append(rows, row{s, summarize(v).p50})
			}
			sort.Slice(rows, func(i, j int) bool { return rows[i].med < rows[j].med })
			for _, r := range rows {
				fmt.Printf("  %8.2f  %s\n", r.med, r.step)
			}
		}
	}
	sa, sb, sd := summarize(a), summarize(b), summarize(d)
	fmt.Printf("%d pairs, cold Create -> first result: A p50 %.1f ms (%s %.1f), B p50 %.1f ms (%s %.1f), B-A per pair p50 %+.1f ms\n",
		*nCold, sa.p50, sa.tailName(), sa.tail(), sb.p50, sb.tailName(), sb.tail(), sd.p50)
	os.Exit(0)
}

// abRoundTrips: the warm round trip of two sandbox binaries, block by block
// on two sandboxes alive at once, so that both see the same load.
func abRoundTrips(ctx context.Context, bins []string, rt string) {
	var sbs [2]*sandboxes.Sandbox
	var dirs [2]string
	for i, bin := range bins {
		cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt, SandboxBinary: bin, NoRootUser: *abNoRootB && i == 1}}
		sb, err := sandboxes.Create(ctx, cfg)
		check(err)
		defer sb.Close()
		_, err = sb.RunCode(ctx, "x = 40")
		check(err)
		sbs[i], dirs[i] = sb, local.SandboxDir(rt, sb.ID())
	}
	const block = 100
	var rtts [2][]float64
	var cpu, runs [2]float64 // ms, times the sandbox's threads were scheduled in
	for k := 0; len(rtts[1]) < *nRTT; k++ {
		for j := range 2 {
			i := j
			if k%2 == 1 {
				i = 1 - j
			}
			c0, r0 := sandboxSched(dirs[i])
			for range block {
				rtts[i] = append(rtts[i], timeRunCode(ctx, sbs[i]))
			}
			c1, r1 := sandboxSched(dirs[i])
			cpu[i] += c1 - c0
			runs[i] += r1 - r0
		}
	}
	for i, bin := range bins {
		s := summarize(rtts[i])
		n := float64(len(rtts[i]))
		fmt.Printf("%s: x + 2 round trip p50 %.3f ms (%s %.3f); per round trip the sandbox's threads ran %.3f ms and were scheduled in %.2f times; %d round trips\n",
			bin, s.p50, s.tailName(), s.tail(), cpu[i]/n, runs[i]/n, len(rtts[i]))
	}
}
