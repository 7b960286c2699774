package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Usage implements driver.UsageReader from the sandbox's cgroup files
// (v2, or v1's memory, cpu and cpuacct controllers).
func (i *instance) Usage(ctx context.Context) (driver.Usage, error) {
	r, err := i.record()
	if err != nil {
		return driver.Usage{}, err
	}
	if len(r.Cgroups) == 0 {
		return driver.Usage{}, fmt.Errorf("sandbox %s has no cgroup to read usage from: %w", i.id, sberr.ErrNotSupported)
	}
	u := driver.Usage{Time: time.Now(), CPUs: r.CPUs, MemLimit: r.Memory}
	var used, cache, shmem int64
	cpuKnown := false
	for _, d := range r.Cgroups {
		if n, ok := readInt(d, "memory.current"); ok { // v2
			used = n
		} else if n, ok := readInt(d, "memory.usage_in_bytes"); ok { // v1
			used = n
		}
		if st := readKV(d, "memory.stat"); st != nil {
			if v, ok := st["file"]; ok { // v2
				cache = v
			} else if v, ok := st["total_cache"]; ok { // v1
				cache = v
			}
			if v, ok := st["shmem"]; ok {
				shmem = v
			} else if v, ok := st["total_shmem"]; ok {
				shmem = v
			}
		}
		if st := readKV(d, "cpu.stat"); st != nil {
			if v, ok := st["usage_usec"]; ok { // v2
				u.CPUTime, cpuKnown = time.Duration(v)*time.Microsecond, true
			}
		}
		if n, ok := readInt(d, "cpuacct.usage"); ok { // v1, nanoseconds
			u.CPUTime, cpuKnown = time.Duration(n), true
		}
	}
	if !cpuKnown {
		// v1 with cpuacct mounted apart: add up the CPU time of the
		// processes in the cgroup (exited ones are not counted).
		var ticks uint64
		for _, d := range r.Cgroups {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				if st, ok := procstat.Read(pid); ok {
					ticks += st.UTime + st.STime
				}
			}
			break
		}
		u.CPUTime = time.Duration(ticks) * 10 * time.Millisecond // USER_HZ = 100
	}
	// Page cache that is tmpfs (shmem) is the sandbox's files, not cache.
	cache -= shmem
	u.MemCache = max(cache, 0)
	u.MemUsed = max(used-u.MemCache-shmem, 0)
	u.DiskUsed = shmem
	return u, nil
}

func readInt(dir, name string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n, err == nil
}

// readKV reads a cgroup "key value" file; nil when it is absent.
func readKV(dir, name string) map[string]int64 {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil {
			out[k] = n
		}
	}
	return out
}
