package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
	"github.com/code-sandboxes/code-sandboxes/local"
)

var (
	traceN     = flag.Int("trace", 0, "trace this many cold starts step by step (CODE_SANDBOXES_TRACE), print the median timeline and exit")
	traceAlive = flag.Int("trace-alive", 0, "with -trace: first create this many sandboxes (untraced) and keep them alive while tracing, to see which steps grow with the sandboxes alive")
)

// traceColdStarts creates n sandboxes with tracing on, one after the other,
// runs 1 + 1 in each, and writes the median time of every step since
// "create: start" (steps in the order of their medians).
func traceColdStarts(ctx context.Context, w io.Writer, n int) error {
	dir, err := os.MkdirTemp("", "cs-trace-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: filepath.Join(dir, "rt")}}
	for range *traceAlive {
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			return fmt.Errorf("trace: creating the sandboxes kept alive: %w", err)
		}
		defer sb.Close()
	}
	at := map[string][]float64{}
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("trace-%d", i))
		// The caller's own marks go through the package's file, opened at
		// init from the environment: point it at this run's file.
		os.Setenv(trace.Env, p)
		trace.Reopen()
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			return err
		}
		ex, err := sb.RunCode(ctx, "1 + 1")
		if err != nil {
			return err
		}
		trace.Mark("caller: first result")
		if ex.Text() != "2" {
			return fmt.Errorf("trace: got %q", ex.Text())
		}
		_ = sb.Close()
		steps, err := readTrace(p)
		if err != nil {
			return err
		}
		for k, v := range steps {
			at[k] = append(at[k], v)
		}
	}
	os.Unsetenv(trace.Env)
	trace.Reopen()
	type row struct {
		step string
		med  float64
	}
	var rows []row
	for k, v := range at {
		sort.Float64s(v)
		rows = append(rows, row{k, v[len(v)/2]})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].med < rows[j].med })
	fmt.Fprintf(w, "| step (%d cold starts, %d other sandboxes alive, medians) | at ms | delta ms |\n|---|---|---|\n", n, *traceAlive)
	prev := 0.0
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.2f | %.2f |\n", r.step, r.med, r.med-prev)
		prev = r.med
	}
	return nil
}

// readTrace returns each step's time (ms) since "create: start"; a step
// seen several times (one line per process that went through it, or per
// frame) counts the first.
func readTrace(path string) (map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type mark struct {
		ns   int64
		step string
	}
	var marks []mark
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 3)
		if len(parts) != 3 {
			continue
		}
		ns, err := strconv.ParseInt(parts[0], 10, 64)
		if err != nil {
			continue
		}
		marks = append(marks, mark{ns, parts[2]})
	}
	sort.SliceStable(marks, func(i, j int) bool { return marks[i].ns < marks[j].ns })
	var t0 int64 = -1
	out := map[string]float64{}
	seen := map[string]int{}
	for _, m := range marks {
		if m.step == "create: start" && t0 < 0 {
			t0 = m.ns
		}
		if t0 < 0 {
			continue
		}
		// Name repeated steps by occurrence (the runtime comes up in
		// three processes).
		seen[m.step]++
		name := m.step
		if c := seen[m.step]; c > 1 {
			name = fmt.Sprintf("%s (#%d)", m.step, c)
		}
		out[name] = float64(m.ns-t0) / 1e6
	}
	if t0 < 0 {
		return nil, fmt.Errorf("trace %s: no create: start", path)
	}
	return out, nil
}
