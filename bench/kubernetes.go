package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/kubernetes"
)

// kubeBench measures cold create → first result on the kubernetes variant
// (the cluster of scripts/with-k8s.sh) and create from a warm pool, against
// the local variant's number on the same environment (localP50).
func kubeBench(ctx context.Context, rep *strings.Builder, localP50 float64) {
	rep.WriteString("## The kubernetes variant (issue 8)\n\n")
	imp := os.Getenv("CODE_SANDBOXES_K8S_IMPORT")
	if os.Getenv("KUBECONFIG") == "" || imp == "" {
		rep.WriteString("Not measured: no cluster (run `make bench`, which brings one up with scripts/with-k8s.sh).\n\n")
		return
	}
	st, err := environment.Open("")
	check(err)
	py, err := st.Resolve("python")
	check(err)
	exe, err := os.Executable()
	check(err)
	dir, _ := os.MkdirTemp("", "cs-bench-k8s-")
	defer os.RemoveAll(dir)
	tarPath := filepath.Join(dir, "python.tar")
	f, err := os.Create(tarPath)
	check(err)
	t := time.Now()
	check(environment.WriteImageTar(ctx, py, environment.ImageTag(py), []environment.ExtraFile{{Path: environment.AgentPath, HostPath: exe, Mode: 0o755}}, f))
	check(f.Close())
	export := since(t)
	t = time.Now()
	argv := append(strings.Fields(imp), tarPath)
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		check(fmt.Errorf("import: %v: %s", err, out))
	}
	load := since(t)
	cfg := sandboxes.Config{Variant: "kubernetes", NetworkPolicy: sandboxes.NetworkAll}
	firstResult := func(c sandboxes.Config) float64 {
		t := time.Now()
		sb, err := sandboxes.Create(ctx, c)
		check(err)
		ex, err := sb.RunCode(ctx, "1 + 1")
		check(err)
		if ex.Text() != "2" {
			check(fmt.Errorf("kubernetes first result: %q", ex.Text()))
		}
		ms := since(t)
		_ = sb.Close()
		return ms
	}
	var cold []float64
	for i := 0; i < *nCold; i++ {
		cold = append(cold, firstResult(cfg))
	}
	pooled := cfg
	opts, _ := pooled.Options.(kubernetes.Options)
	opts.WarmPool = 1
	pooled.Options = opts
	var warm []float64
	for i := 0; i < *nCold; i++ {
		deadline := time.Now().Add(3 * time.Minute)
		for i > 0 && kubernetes.Stats().Ready < 1 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // let the pool refill between Creates
		}
		warm = append(warm, firstResult(pooled))
	}
	stats := kubernetes.Stats()
	kubernetes.ClosePools(ctx)
	cs, ws := summarize(cold), summarize(warm)
	fmt.Fprintf(rep, "On the single-node cluster of `scripts/with-k8s.sh` (Kubernetes v1.34.4, containerd 1.6, runc), network `all` (its bridge plugin doesn't enforce NetworkPolicy), the `python` environment exported with the agent in %.1f s and loaded in %.1f s.\n\n", export/1000, load/1000)
	fmt.Fprintf(rep, "| measurement | p50 | %s | ratio to local p50 |\n|---|---|---|---|\n", cs.tailName())
	fmt.Fprintf(rep, "| cold `Create` → first result (%d) | %.0f ms | %.0f ms | %.1f× |\n", len(cold), cs.p50, cs.tail(), cs.p50/localP50)
	fmt.Fprintf(rep, "| from a warm pool of 1 (%d; the first is a miss) | %.0f ms | %.0f ms | %.1f× |\n", len(warm), ws.p50, ws.tail(), ws.p50/localP50)
	fmt.Fprintf(rep, "\nWarm pool: %d hits, %d misses (hit rate %.0f%%).\n\n", stats.Hits, stats.Misses, 100*float64(stats.Hits)/float64(max(1, stats.Hits+stats.Misses)))
}
