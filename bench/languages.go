package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/kernel"
)

// languagesBench: each language kernel's first result (new session → first
// output of the cell) and warm round trip, against the language's own
// interpreter running the same program one-shot (node -e, bash -c,
// Rscript -e, jshell), interleaved (ours, peer, ours, peer). The kernel runs
// unisolated, as in the kernel section: this is the kernel's own cost. The
// workloads are internal/kernel's BenchLanguages (its Go benchmarks run the
// same ones).
func languagesBench(ctx context.Context, rep *strings.Builder) {
	dir, err := os.MkdirTemp("", "cs-bench-lang-")
	check(err)
	defer os.RemoveAll(dir)
	rep.WriteString("## Language kernels\n\n")
	fmt.Fprintf(rep, "Per language, %d interleaved runs of: a new kernel session → first output of the cell, and the same program one-shot by the language's own interpreter (the peer); then %d round trips of the cell on one warm session. The kernels run unisolated (their own cost, as in the kernel section).\n\n", *nCold, *nRTT)
	rep.WriteString("| language | cell | first result p50 | max | peer | peer p50 | first result / peer | warm round trip p50 | tail | round trip / peer |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range kernel.BenchLanguages {
		if err := kernel.CheckLanguage(ctx, l.Lang, nil); err != nil {
			fmt.Fprintf(rep, "| %s | | not measured: %v | | | | | | | |\n", l.Lang, err)
			continue
		}
		args, err := l.PeerArgs(dir)
		check(err)
		scripts, err := os.MkdirTemp(dir, "scripts-")
		check(err)
		// The kernels' temporary files under dir too: a kernel ends with
		// SIGKILL when its session closes, and R's session directory
		// (TMPDIR/RtmpXXXXXX) would stay in the host's /tmp, 21 a run.
		env := append(os.Environ(), "TMPDIR="+dir)
		var firsts, peers []float64
		var peerErr error
		for i := 0; i < *nCold; i++ {
			f, err := langFirstResult(ctx, l, scripts, env)
			check(err)
			firsts = append(firsts, f)
			if peerErr == nil {
				var p []float64
				if p, peerErr = timeCmd(1, l.Peer, args...); peerErr == nil {
					peers = append(peers, p...)
				}
			}
		}
		rtts, err := langRoundTrips(ctx, l, scripts, env, *nRTT)
		check(err)
		fs, rs := summarize(firsts), summarize(rtts)
		peerCell, ratioF, ratioR := "not measured: "+fmt.Sprint(peerErr), "-", "-"
		ps := summarize(peers)
		if peerErr == nil {
			peerCell = fmt.Sprintf("%.1f ms", ps.p50)
			ratioF, ratioR = fmt.Sprintf("%.2f×", fs.p50/ps.p50), fmt.Sprintf("%.3f×", rs.p50/ps.p50)
		}
		fmt.Fprintf(rep, "| %s | `%s` | %.1f ms | %.1f ms | `%s %s` | %s | %s | %.2f ms | %.2f ms (%s) | %s |\n",
			l.Lang, l.Cell, fs.p50, fs.max, l.Peer, strings.Join(peerShown(args), " "), peerCell, ratioF, rs.p50, rs.tail(), rs.tailName(), ratioR)
		samples[l.Lang+" kernel first result"] = firsts
	}
	rep.WriteString("\n")
}

// peerShown is the peer's arguments for the table (the script file's
// temporary path shortened to its name).
func peerShown(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.HasPrefix(a, os.TempDir()) {
			a = a[strings.LastIndex(a, "/")+1:]
		}
		out[i] = a
	}
	return out
}

// langFirstResult: a new session of l's kernel until the cell's first
// output, then closed.
func langFirstResult(ctx context.Context, l kernel.BenchLanguage, scripts string, env []string) (float64, error) {
	t := time.Now()
	s := kernel.NewSession(kernel.Options{Python: *python, ScriptDir: scripts, Language: l.Lang, Cwd: os.TempDir(), Env: env})
	defer s.Close()
	got := false
	if _, err := s.Execute(ctx, kernel.Request{Code: l.Cell}, func(e kernel.Event) {
		got = got || e.Type == kernel.EventError || e.IsMainResult || e.Type == kernel.EventStdout
	}); err != nil {
		return 0, fmt.Errorf("%s first result: %w", l.Lang, err)
	}
	if !got {
		return 0, fmt.Errorf("%s first result: no output", l.Lang)
	}
	return since(t), nil
}

// langRoundTrips: n runs of the cell on one session after the setup.
func langRoundTrips(ctx context.Context, l kernel.BenchLanguage, scripts string, env []string, n int) ([]float64, error) {
	s := kernel.NewSession(kernel.Options{Python: *python, ScriptDir: scripts, Language: l.Lang, Cwd: os.TempDir(), Env: env})
	defer s.Close()
	if _, err := s.Execute(ctx, kernel.Request{Code: l.Setup}, nil); err != nil {
		return nil, fmt.Errorf("%s setup: %w", l.Lang, err)
	}
	var ms []float64
	for range n {
		t := time.Now()
		if _, err := s.Execute(ctx, kernel.Request{Code: l.Cell}, nil); err != nil {
			return nil, fmt.Errorf("%s round trip: %w", l.Lang, err)
		}
		ms = append(ms, since(t))
	}
	return ms, nil
}
