// The local section: cold starts and round trips of the local variant, and
// the run-code round-trip helpers other sections share.

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

// localBench: cold Create → first result of 1 + 1, and Create alone,
// against bwrap starting python3 -c pass, interleaved.
func localBench(ctx context.Context, rep *strings.Builder) {
	rt, _ := os.MkdirTemp("", "cs-bench-")
	defer os.RemoveAll(rt)
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}
	bwrapArgs := []string{"--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--symlink", "usr/bin", "/bin", "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--unshare-all", "--die-with-parent", "--uid", "1000", "--gid", "100", *python, "-c", "pass"}
	var cold, coldLean, coldNoRoot, coldNoSpare, createOnly, bw []float64
	var bwErr error
	lean, leanErr := leanBinary()
	coldOnce := func() float64 { return firstResult(ctx, cfg, "cold create") }
	// Without the root user a root caller's sandbox otherwise has (its
	// broker is one process and two runs of the binary per start): only
	// as root does the default have one.
	noRoot := cfg
	noRoot.Options = local.Options{RuntimeDir: rt, NoRootUser: true}
	withNoRoot := os.Geteuid() == 0
	steps := []func(){
		func() { withSandboxBinary("", func() { cold = append(cold, coldOnce()) }) },
		func() {
			if leanErr == nil {
				withSandboxBinary(lean, func() { coldLean = append(coldLean, coldOnce()) })
			}
		},
		func() {
			// A process's first Create, or any with spares off: its
			// supervisor starts at its Create (internal/local/spare.go).
			if leanErr == nil {
				os.Setenv(local.SpareSupervisorEnv, "0")
				withSandboxBinary(lean, func() { coldNoSpare = append(coldNoSpare, coldOnce()) })
				os.Unsetenv(local.SpareSupervisorEnv)
			}
		},
		func() {
			if leanErr == nil && withNoRoot {
				withSandboxBinary(lean, func() { coldNoRoot = append(coldNoRoot, firstResult(ctx, noRoot, "cold create, no root user")) })
			}
		},
		func() {
			if bwErr == nil {
				var b []float64
				if b, bwErr = timeCmd(1, "bwrap", bwrapArgs...); bwErr == nil {
					bw = append(bw, b...)
				}
			}
		},
		func() {
			t := time.Now()
			sb, err := sandboxes.Create(ctx, cfg)
			check(err)
			createOnly = append(createOnly, since(t))
			check(sb.Close())
			local.WaitSpares()
		},
	}
	for i := 0; i < *nCold; i++ {
		// The order turns each round: what one measurement leaves behind
		// (a sandbox's processes exiting, freed memory, the page cache
		// of the binary that links every variant) lands on each of the
		// others as often, not always on the one after it.
		for j := range steps {
			steps[(i+j)%len(steps)]()
		}
	}
	cs, co, bs := summarize(cold), summarize(createOnly), summarize(bw)
	rep.WriteString("## Local sandboxes (issue 3)\n\n")
	fmt.Fprintf(rep, "%d each, interleaved: cold Create → first result (sandbox processes: this benchmark's binary re-executed, then `cmd/code-sandboxes-sandbox` named in `CODE_SANDBOXES_SANDBOX_BINARY`, with `cmd/code-sandboxes-init` beside it for each sandbox's first stage), the peer, Create alone.\n\n", *nCold)
	fmt.Fprintf(rep, "| measurement | p50 | %s | ratio to bwrap p50 |\n|---|---|---|---|\n", cs.tailName())
	if bwErr == nil {
		fmt.Fprintf(rep, "| `bwrap --unshare-all … python3 -c pass` (peer) | %.1f ms | %.1f ms | 1× |\n", bs.p50, bs.tail())
	} else {
		fmt.Fprintf(rep, "| bwrap baseline | not measured: %v | | |\n", bwErr)
		bs.p50 = 0
	}
	ratio := func(v float64) string {
		if bs.p50 == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", v/bs.p50)
	}
	fmt.Fprintf(rep, "| `Create` (sandbox answers) | %.1f ms | %.1f ms | %s |\n", co.p50, co.tail(), ratio(co.p50))
	fmt.Fprintf(rep, "| cold `Create` → first result of `1 + 1` (this binary, which links every variant) | %.1f ms | %.1f ms | %s (target ≤ 1.6×) |\n", cs.p50, cs.tail(), ratio(cs.p50))
	if leanErr == nil {
		cl := summarize(coldLean)
		fmt.Fprintf(rep, "| the same, sandbox processes from `cmd/code-sandboxes-sandbox` (stage 1 from `cmd/code-sandboxes-init`) | %.1f ms | %.1f ms | %s (target ≤ 1.6×) |\n", cl.p50, cl.tail(), ratio(cl.p50))
		samples["cold Create → first result (lean sandbox binary)"] = coldLean
		ns := summarize(coldNoSpare)
		fmt.Fprintf(rep, "| the same without a spare supervisor (a process's first `Create`, or `%s=0`; the rows above had one waiting, started %v after the Create before theirs) | %.1f ms | %.1f ms | %s |\n", local.SpareSupervisorEnv, local.SpareDelay, ns.p50, ns.tail(), ratio(ns.p50))
		if withNoRoot {
			nr := summarize(coldNoRoot)
			fmt.Fprintf(rep, "| the same without the root user (`local.Options.NoRootUser`: no sudo inside, no broker process) | %.1f ms | %.1f ms | %s |\n", nr.p50, nr.tail(), ratio(nr.p50))
		}
	} else {
		fmt.Fprintf(rep, "| the same, sandbox processes from `cmd/code-sandboxes-sandbox` | not measured: %v | | |\n", leanErr)
	}
	rep.WriteString("| `docker run` | see the docker variant's section below | | |\n")
	rep.WriteString("\n")
	samples["cold Create → first result"] = cold
	samples["Create (answers)"] = createOnly
	if bwErr == nil {
		samples["bwrap … python3 -c pass"] = bw
	}
}

// runCodeRTT creates one sandbox and times RunCode("x + 2") round trips.
func runCodeRTT(ctx context.Context, cfg sandboxes.Config) []float64 {
	sb := rttSandbox(ctx, cfg)
	defer sb.Close()
	return rttBlock(ctx, sb, *nRTT)
}

// rttSandbox creates a sandbox with x = 40, for timeRunCode.
func rttSandbox(ctx context.Context, cfg sandboxes.Config) *sandboxes.Sandbox {
	sb, err := sandboxes.Create(ctx, cfg)
	check(err)
	_, err = sb.RunCode(ctx, "x = 40")
	check(err)
	return sb
}

// rttBlock times n round trips of x + 2 on sb, one right after the other.
func rttBlock(ctx context.Context, sb *sandboxes.Sandbox, n int) []float64 {
	ms := make([]float64, 0, n)
	for range n {
		ms = append(ms, timeRunCode(ctx, sb))
	}
	return ms
}

// timeRunCode times one RunCode("x + 2") on a sandbox rttSandbox made.
func timeRunCode(ctx context.Context, sb *sandboxes.Sandbox) float64 {
	t := time.Now()
	ex, err := sb.RunCode(ctx, "x + 2")
	check(err)
	if ex.Text() != "42" {
		check(fmt.Errorf("round trip: got %q", ex.Text()))
	}
	return since(t)
}
