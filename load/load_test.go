// Package load holds load, churn and soak tests of the local variant. The
// defaults fit a 2-core machine and make test; larger runs by flag:
//
//	go test ./load -load.n 8 -load.m 200 -load.lines 50 -soak 10m -v
package load_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/local"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

var (
	nFlag     = flag.Int("load.n", 3, "concurrent sandboxes")
	mFlag     = flag.Int("load.m", 20, "executions per sandbox")
	linesFlag = flag.Int("load.lines", 20, "output lines per execution (checked present, in order, attributed)")
	churnFlag = flag.Int("load.churn", 6, "create/kill cycles per worker in the churn test")
	soakFlag  = flag.Duration("soak", 4*time.Second, "soak duration (mixed load on 2 sandboxes)")
)

var rt string

func TestMain(m *testing.M) {
	flag.Parse()
	d, err := os.MkdirTemp("", "cs-load-")
	if err != nil {
		panic(err)
	}
	rt = d
	code := m.Run()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ents, _ := os.ReadDir(rt)
		if len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "LINGERING: %d sandboxes left in the runtime dir\n", len(ents))
			code = 1
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	os.RemoveAll(rt)
	os.Exit(code)
}

func cfg() sandboxes.Config {
	return sandboxes.Config{Options: local.Options{RuntimeDir: rt}, Memory: 512 << 20}
}

func require(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	err := isolate.CheckSupport()
	sandboxestest.Require(t, err == nil, fmt.Sprintf("local sandboxes are not supported here: %v", err))
}

type stats struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (s *stats) add(d time.Duration) { s.mu.Lock(); s.lat = append(s.lat, d); s.mu.Unlock() }

func (s *stats) pct(p float64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lat) == 0 {
		return 0
	}
	l := append([]time.Duration(nil), s.lat...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	i := int(p * float64(len(l)-1))
	return l[i]
}

// execute runs one execution that prints `lines` tagged lines (to stdout
// and, every fifth, stderr) and checks every one is there, in order, tagged
// with this execution and nothing else.
func execute(ctx context.Context, sb *sandboxes.Sandbox, tag string, lines int) error {
	code := fmt.Sprintf("import sys\nfor i in range(%d):\n    print(%q, i, file=sys.stderr if i %% 5 == 4 else sys.stdout, flush=True)\n%q", lines, tag, tag)
	// Output arrives in chunks that need not be whole lines (a print is
	// several writes): reassemble each stream, then split into lines.
	var mu sync.Mutex
	var stream [2]strings.Builder
	var order []string
	cb := func(m sandboxes.OutputMessage) {
		mu.Lock()
		i := 0
		if m.Error {
			i = 1
		}
		stream[i].WriteString(m.Line)
		mu.Unlock()
	}
	ex, err := sb.RunCode(ctx, code, sandboxes.OnStdout(cb), sandboxes.OnStderr(cb))
	if err != nil {
		return err
	}
	if ex.Error != nil || ex.Text() != tag {
		return fmt.Errorf("%s: result %q, error %v", tag, ex.Text(), ex.Error)
	}
	for i := range stream {
		for _, l := range strings.Split(strings.TrimSuffix(stream[i].String(), "\n"), "\n") {
			if l != "" {
				order = append(order, l)
			}
		}
	}
	var out []string
	for _, l := range order {
		if !strings.HasPrefix(l, tag+" ") {
			return fmt.Errorf("%s: foreign or mangled line %q", tag, l)
		}
		out = append(out, l)
	}
	if len(out) != lines {
		return fmt.Errorf("%s: %d lines, want %d", tag, len(out), lines)
	}
	// stdout and stderr are separate pipes: order is checked per stream.
	next := map[bool]int{}
	for _, l := range out {
		var n int
		fmt.Sscanf(strings.TrimPrefix(l, tag+" "), "%d", &n)
		isErr := n%5 == 4
		for next[isErr] < lines && (next[isErr]%5 == 4) != isErr {
			next[isErr]++
		}
		if n != next[isErr] {
			return fmt.Errorf("%s: line %d arrived where %d was due (lost or reordered)", tag, n, next[isErr])
		}
		next[isErr]++
	}
	return nil
}

// TestLoad: N sandboxes, each running M executions back to back, all at
// once. Reports throughput and latency percentiles.
func TestLoad(t *testing.T) {
	require(t)
	n, m, lines := *nFlag, *mFlag, *linesFlag
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sbs := make([]*sandboxes.Sandbox, n)
	var wg sync.WaitGroup
	cstart := time.Now()
	errc := make(chan error, n*m+n)
	for i := range sbs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sb, err := sandboxes.Create(ctx, cfg())
			if err != nil {
				errc <- err
				return
			}
			sbs[i] = sb
		}(i)
	}
	wg.Wait()
	createD := time.Since(cstart)
	defer func() {
		for _, sb := range sbs {
			if sb != nil {
				_ = sb.Close()
			}
		}
	}()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	var st stats
	start := time.Now()
	for i, sb := range sbs {
		wg.Add(1)
		go func(i int, sb *sandboxes.Sandbox) {
			defer wg.Done()
			for j := 0; j < m; j++ {
				t0 := time.Now()
				ectx, ecancel := context.WithTimeout(ctx, time.Minute)
				err := execute(ectx, sb, fmt.Sprintf("sb%d-ex%d", i, j), lines)
				ecancel()
				if err != nil {
					errc <- err
					return
				}
				st.add(time.Since(t0))
			}
		}(i, sb)
	}
	wg.Wait()
	d := time.Since(start)
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	total := n * m
	t.Logf("RESULT load: %d sandboxes created concurrently in %s; %d executions x %d lines in %s = %.1f exec/s, %.0f lines/s; latency p50 %s p99 %s max %s; every line present, in order, attributed",
		n, createD.Round(time.Millisecond), total, lines, d.Round(time.Millisecond), float64(total)/d.Seconds(), float64(total*lines)/d.Seconds(),
		st.pct(0.5).Round(time.Microsecond), st.pct(0.99).Round(time.Microsecond), st.pct(1).Round(time.Microsecond))
}

// TestChurn: create/run/kill cycles from 2 workers; nothing may linger.
func TestChurn(t *testing.T) {
	require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var cr, kl stats
	var wg sync.WaitGroup
	errc := make(chan error, 2**churnFlag)
	start := time.Now()
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < *churnFlag; i++ {
				t0 := time.Now()
				sb, err := sandboxes.Create(ctx, cfg())
				if err != nil {
					errc <- err
					return
				}
				cr.add(time.Since(t0))
				if err := execute(ctx, sb, fmt.Sprintf("w%d-c%d", w, i), 5); err != nil {
					errc <- err
				}
				t1 := time.Now()
				if i%2 == 0 {
					err = sb.Close()
				} else {
					// Kill from "another process" (by id), then the handle.
					_, err = sandboxes.Kill(ctx, cfg(), sb.ID(), sandboxes.ListOptions{})
					_ = sb.Close()
				}
				kl.add(time.Since(t1))
				if err != nil {
					errc <- err
				}
			}
		}(w)
	}
	wg.Wait()
	d := time.Since(start)
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	list, err := sandboxes.List(ctx, cfg(), sandboxes.ListOptions{})
	if err != nil || len(list) != 0 {
		t.Errorf("after churn, listed: %v %v", list, err)
	}
	cycles := 2 * *churnFlag
	t.Logf("RESULT churn: %d create/run/kill cycles in %s (%.2f cycles/s); create p50 %s p99 %s; kill p50 %s p99 %s; nothing listed after",
		cycles, d.Round(time.Millisecond), float64(cycles)/d.Seconds(), cr.pct(0.5).Round(time.Millisecond), cr.pct(0.99).Round(time.Millisecond),
		kl.pct(0.5).Round(time.Millisecond), kl.pct(0.99).Round(time.Millisecond))
}

// TestSoak: for -soak, two sandboxes take mixed work (tagged executions,
// file round trips, commands, an occasional timeout); every result is
// checked and the agent's memory must not grow without bound.
func TestSoak(t *testing.T) {
	require(t)
	ctx, cancel := context.WithTimeout(context.Background(), *soakFlag+5*time.Minute)
	defer cancel()
	var st stats
	var wg sync.WaitGroup
	var mu sync.Mutex
	ops := 0
	errc := make(chan error, 100)
	end := time.Now().Add(*soakFlag)
	for w := 0; w < 2; w++ {
		sb, err := sandboxes.Create(ctx, cfg())
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		wg.Add(1)
		go func(w int, sb *sandboxes.Sandbox) {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				t0 := time.Now()
				var err error
				switch i % 4 {
				case 0, 1:
					err = execute(ctx, sb, fmt.Sprintf("soak%d-%d", w, i), 10)
				case 2:
					p := fmt.Sprintf("/tmp/soak-%d", i)
					want := []byte(strings.Repeat(fmt.Sprint(i), 1000))
					if err = sb.Files().WriteBytes(ctx, p, want); err == nil {
						var got []byte
						got, err = sb.Files().ReadBytes(ctx, p)
						if err == nil && string(got) != string(want) {
							err = fmt.Errorf("file round trip %s differs", p)
						}
						_ = sb.Files().Remove(ctx, p)
					}
				case 3:
					if i%20 == 3 {
						ex, e := sb.RunCode(ctx, "while True: pass", sandboxes.WithTimeout(300*time.Millisecond))
						if e == nil && !ex.TimedOut {
							e = fmt.Errorf("timeout not reported")
						}
						err = e
					} else {
						var r *sandboxes.CommandResult
						r, err = sb.Commands().Run(ctx, fmt.Sprintf("echo cmd-%d", i))
						if err == nil && strings.TrimSpace(r.Stdout) != fmt.Sprintf("cmd-%d", i) {
							err = fmt.Errorf("command output %q", r.Stdout)
						}
					}
				}
				if err != nil {
					select {
					case errc <- err:
					default:
					}
					return
				}
				st.add(time.Since(t0))
				mu.Lock()
				ops++
				mu.Unlock()
			}
		}(w, sb)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	t.Logf("RESULT soak %s: %d mixed operations (%.1f ops/s), latency p50 %s p99 %s max %s, no error",
		*soakFlag, ops, float64(ops)/soakFlag.Seconds(), st.pct(0.5).Round(time.Microsecond), st.pct(0.99).Round(time.Microsecond), st.pct(1).Round(time.Microsecond))
}
