package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// filesBench: a 2 GiB file written into a sandbox and read back through the
// Go API (Files.Write from a reader, Files.Read into a writer), 3 times, with
// this process's resident memory sampled during the transfers.
func filesBench(ctx context.Context, rep *strings.Builder) {
	const size = 2 << 30
	rt, _ := os.MkdirTemp("", "cs-bench-files-")
	defer os.RemoveAll(rt)
	cfg := sandboxes.Config{Memory: 5 << 30, Options: local.Options{RuntimeDir: rt, HomeSize: 5 << 29}}
	sb, err := sandboxes.Create(ctx, cfg)
	check(err)
	defer sb.Close()
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			if v := rssKiB(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	before := rssKiB()
	var ws, rs []float64
	for i := 0; i < 3; i++ {
		t := time.Now()
		check(sb.Files().Write(ctx, "/home/user/big", &zeroes{n: size}))
		ws = append(ws, size/time.Since(t).Seconds()/1e6)
		t = time.Now()
		rc, err := sb.Files().Read(ctx, "/home/user/big")
		check(err)
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		check(err)
		if n != size {
			check(fmt.Errorf("files: read %d bytes of %d", n, size))
		}
		rs = append(rs, float64(n)/time.Since(t).Seconds()/1e6)
	}
	close(stop)
	w, r := summarize(ws), summarize(rs)
	rep.WriteString("## Files\n\n")
	fmt.Fprintf(rep, "A 2 GiB file written from a reader (`Files.Write`) into `/home/user` (`local.Options.HomeSize` 2.5 GiB, memory 5 GiB) and read back (`Files.Read` into `io.Discard`), %d times each; this process's resident set sampled every 10 ms.\n\n", len(ws))
	rep.WriteString("| direction | p50 | min | goal |\n|---|---|---|---|\n")
	fmt.Fprintf(rep, "| write | %.0f MB/s | %.0f MB/s | ≥ 500 MB/s |\n", w.p50, minOf(ws))
	fmt.Fprintf(rep, "| read | %.0f MB/s | %.0f MB/s | ≥ 500 MB/s |\n\n", r.p50, minOf(rs))
	fmt.Fprintf(rep, "Caller's resident set: %.0f MiB before, %.0f MiB at its peak during the transfers (6 GiB moved).\n\n", float64(before)/1024, float64(peak.Load())/1024)
}

type zeroes struct{ n int64 }

func (z *zeroes) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n)
	clear(p[:k])
	z.n -= k
	return int(k), nil
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

// rssKiB is this process's resident set (VmRSS), KiB.
func rssKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}
