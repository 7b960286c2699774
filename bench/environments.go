package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/local"
)

var (
	envCold = flag.Bool("envcold", true, "also time a cold build of the python environment in a scratch store (about 5 minutes)")
	docker  = flag.Bool("docker", true, "measure the docker variant (needs a running Docker engine)")
	onlyEnv = flag.Bool("only-variants", false, "run only the environment, docker and kubernetes sections")
)

// envBench measures environment builds (cold and cached) and cold create →
// first result on the python environment, local against docker, plus the
// round trip on each.
func envBench(ctx context.Context, rep *strings.Builder) float64 {
	rep.WriteString("## Environments and the docker variant (issue 5)\n\n")
	st, err := environment.Open("")
	check(err)
	py, err := st.Ensure(ctx, "python", environment.BuildOptions{Progress: os.Stderr})
	check(err)
	spec, _ := environment.Builtin("python")

	rep.WriteString("| build | time | note |\n|---|---|---|\n")
	if *envCold {
		dir, _ := os.MkdirTemp(filepath.Dir(st.Dir), "bench-store-")
		scratch, err := environment.Open(dir)
		check(err)
		t := time.Now()
		b, err := scratch.Build(ctx, spec, environment.BuildOptions{Progress: os.Stderr})
		check(err)
		fmt.Fprintf(rep, "| `python` cold (mmdebstrap from the apt mirror, %s) | %.1f s | same build id as the cached one: %v |\n",
			humanSize(b.SizeBytes), since(t)/1000, b.ID == py.ID)
		check(os.RemoveAll(dir))
	}
	var cached []float64
	for i := 0; i < 20; i++ {
		t := time.Now()
		_, err := st.Build(ctx, spec, environment.BuildOptions{})
		check(err)
		cached = append(cached, since(t))
	}
	fmt.Fprintf(rep, "| `python` cached (id computed, build found) | %.2f ms p50 | 20 runs |\n", summarize(cached).p50)
	derived, err := environment.ParseSpec([]byte("name: bench-derived\nbase: {environment: python}\nfiles: [{path: /etc/bench, content: \"x\"}]\nenv: {BENCH: '1'}\n"), "")
	check(err)
	t := time.Now()
	db, err := st.Build(ctx, derived, environment.BuildOptions{Force: true})
	check(err)
	fmt.Fprintf(rep, "| derived from `python` (+1 file, +1 env var), cold | %.1f s | the copy of the base rootfs dominates |\n\n", since(t)/1000)
	_, _ = st.Remove(db.ID)

	measure := func(cfg sandboxes.Config) (stats, stats, error) {
		var cold []float64
		for i := 0; i < *nCold; i++ {
			t := time.Now()
			sb, err := sandboxes.Create(ctx, cfg)
			if err != nil {
				return stats{}, stats{}, err
			}
			ex, err := sb.RunCode(ctx, "1 + 1")
			if err != nil || ex.Text() != "2" {
				sb.Close()
				return stats{}, stats{}, fmt.Errorf("first result: %v %q", err, ex.Text())
			}
			cold = append(cold, since(t))
			_ = sb.Close()
		}
		return summarize(cold), summarize(runCodeRTT(ctx, cfg)), nil
	}
	rt, _ := os.MkdirTemp("", "cs-bench-env-")
	defer os.RemoveAll(rt)
	localCfg := sandboxes.Config{Environment: "python", Options: local.Options{RuntimeDir: rt}}
	lc, lr, err := measure(localCfg)
	check(err)
	fmt.Fprintf(rep, "Cold `Create` → first result of `1 + 1` (%d each) and the `x + 2` round trip (%d each), both on the `python` environment (build %s).\n\n", *nCold, *nRTT, py.ShortID())
	fmt.Fprintf(rep, "| variant | create → first result p50 | %s | ratio to local | `x + 2` p50 | %s |\n|---|---|---|---|---|---|\n", lc.tailName(), lr.tailName())
	fmt.Fprintf(rep, "| local | %.1f ms | %.1f ms | 1× | %.2f ms | %.2f ms |\n", lc.p50, lc.tail(), lr.p50, lr.tail())
	if !*docker {
		rep.WriteString("| docker | not measured (-docker=false) | | | | |\n\n")
		return lc.p50
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		fmt.Fprintf(rep, "| docker | not measured: no Docker engine answers (%v) | | | | |\n\n", err)
		return lc.p50
	}
	dc, dr, err := measure(sandboxes.Config{Variant: "docker", Environment: "python"})
	if err != nil {
		fmt.Fprintf(rep, "| docker | failed: %v | | | | |\n\n", err)
		return lc.p50
	}
	fmt.Fprintf(rep, "| docker | %.1f ms | %.1f ms | %.2f× | %.2f ms | %.2f ms |\n", dc.p50, dc.tail(), dc.p50/lc.p50, dr.p50, dr.tail())
	image := "code-sandboxes-env:" + py.ID
	raw, rawErr := timeCmd(*nCold, "docker", "run", "--rm", "--network", "none", image, "python3", "-c", "pass")
	if rawErr == nil {
		rs := summarize(raw)
		fmt.Fprintf(rep, "| peer: `docker run --rm --network none <image> python3 -c pass` | %.1f ms | %.1f ms | %.2f× | | |\n", rs.p50, rs.tail(), rs.p50/lc.p50)
	} else {
		fmt.Fprintf(rep, "| peer: `docker run … python3 -c pass` | failed: %v | | | | |\n", rawErr)
	}
	rep.WriteString("\n")
	return lc.p50
}

func humanSize(n int64) string {
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
