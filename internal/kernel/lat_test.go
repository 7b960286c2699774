package kernel

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestStartupLatency (KERNEL_LATENCY=1) interleaves `python3 -c pass` with a
// new Session's first result so machine noise hits both alike; logs medians.
func TestStartupLatency(t *testing.T) {
	if os.Getenv("KERNEL_LATENCY") == "" {
		t.Skip("set KERNEL_LATENCY=1")
	}
	var pass, first, rt []time.Duration
	s0 := newTestSession(t)
	exec1(t, s0, "x = 40")
	for range 25 {
		t0 := time.Now()
		exec.Command(testPython, "-c", "pass").Run()
		pass = append(pass, time.Since(t0))
		t0 = time.Now()
		s := NewSession(Options{Python: testPython, ScriptDir: scriptDir(t)})
		s.Execute(context.Background(), Request{Code: "1 + 1"}, nil)
		first = append(first, time.Since(t0))
		s.Close()
		t0 = time.Now()
		s0.Execute(context.Background(), Request{Code: "x + 2"}, nil)
		rt = append(rt, time.Since(t0))
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	t.Logf("python3 -c pass p50 %v; new Session first result p50 %v; warm x+2 round trip p50 %v", med(pass), med(first), med(rt))
}
