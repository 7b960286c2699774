package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

var onlyPool = flag.Bool("only-pool", false, "run only the local warm-pool section; print it, leave -o alone")

// poolBench: Create → first result of 1 + 1 from a local warm pool of 1
// (waiting for the pool to be full before each claim, so each is a hit)
// against cold Creates, interleaved.
func poolBench(ctx context.Context, rep *strings.Builder) {
	rt, err := os.MkdirTemp("", "cs-bench-pool-")
	check(err)
	defer os.RemoveAll(rt)
	cold := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}
	warm := cold
	warm.Options = local.Options{RuntimeDir: rt, WarmPool: 1}
	defer local.CloseWarmPools(ctx)
	first := func(cfg sandboxes.Config) float64 { return firstResult(ctx, cfg, "pool bench") }
	// The first warm Create is a miss that starts the pool.
	first(warm)
	before := local.WarmPoolStats()
	var ws, cs []float64
	for i := 0; i < *nCold; i++ {
		for local.WarmPoolStats().Ready < 1 {
			time.Sleep(5 * time.Millisecond)
		}
		ws = append(ws, first(warm))
		cs = append(cs, first(cold))
	}
	after := local.WarmPoolStats()
	w, c := summarize(ws), summarize(cs)
	samples["warm pool claim → first result"] = ws
	rep.WriteString("## Local warm pool\n\n")
	fmt.Fprintf(rep, "`local.Options.WarmPool: 1`: Create → first result of `1 + 1`, a claim from the pool (waiting for it to refill between claims) and a cold Create, interleaved, %d each; %d hits, %d misses.\n\n", len(ws), after.Hits-before.Hits, after.Misses-before.Misses)
	fmt.Fprintf(rep, "| path | p50 | %s | ratio to cold p50 |\n|---|---|---|---|\n", w.tailName())
	fmt.Fprintf(rep, "| warm pool claim → first result | %.2f ms | %.2f ms | %.3f× (goal ≤ 3 ms) |\n", w.p50, w.tail(), w.p50/c.p50)
	fmt.Fprintf(rep, "| cold Create → first result | %.1f ms | %.1f ms | 1× |\n\n", c.p50, c.tail())
}
