package sandboxes_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// TestLocalScaleLeavesNothing: many sandboxes created at once (a small
// scale run; bench/ does the thousand) all run, and once closed leave
// nothing: no directory in the runtime dir, no cgroup, no supervisor or
// agent process.
func TestLocalScaleLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	const n, parallel = 24, 4
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt := poolRuntimeDir(t)
	cfg := sandboxes.Config{Variant: "local", Local: sandboxes.LocalConfig{RuntimeDir: rt}}
	sbs := make([]*sandboxes.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for i := range sbs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sbs[i], errs[i] = sandboxes.Create(ctx, cfg)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, sb := range sbs {
				if sb != nil {
					sb.Close()
				}
			}
			t.Fatalf("create %d: %v", i, err)
		}
	}
	for i, sb := range sbs {
		if ex, err := sb.RunCode(ctx, fmt.Sprintf("%d * 2", i)); err != nil || ex.Text() != fmt.Sprint(i*2) {
			t.Fatalf("sandbox %d: %v %v", i, ex, err)
		}
	}
	if l, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{}); err != nil || len(l) != n {
		t.Fatalf("List: %d sandboxes, %v; want %d", len(l), err, n)
	}
	recs := poolRecords(t, rt)
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	for _, sb := range sbs {
		wg.Go(func() {
			if err := sb.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ents, _ := os.ReadDir(rt); len(ents) != 0 {
		t.Fatalf("%d entries left in the runtime dir", len(ents))
	}
	for _, r := range recs {
		for _, d := range r.Cgroups {
			if _, err := os.Stat(d); err == nil {
				t.Errorf("cgroup %s of %s left", d, r.ID)
			}
		}
		for _, pid := range []int{r.ShimPid, r.AgentPid} {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil &&
				(strings.HasPrefix(string(b), "code-sandboxes-shim") || strings.HasPrefix(string(b), "code-sandboxes-agent")) {
				t.Errorf("process %d of %s still running: %q", pid, r.ID, b)
			}
		}
	}
}
