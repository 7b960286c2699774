package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/types/container"
	mobyclient "github.com/moby/moby/client"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
)

// Usage implements driver.UsageReader with one sample of the engine's
// stats, which it reads from the container's cgroup.
func (i *instance) Usage(ctx context.Context) (driver.Usage, error) {
	info, err := i.Info(ctx)
	if err != nil {
		return driver.Usage{}, err
	}
	res, err := i.e.c.ContainerStats(ctx, i.containerID, mobyclient.ContainerStatsOptions{})
	if err != nil {
		return driver.Usage{}, fmt.Errorf("stats of sandbox %s: %w", i.id, err)
	}
	defer res.Body.Close()
	var st container.StatsResponse
	// One sample is a few KiB; the bound keeps a broken engine from
	// filling our memory.
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&st); err != nil {
		return driver.Usage{}, fmt.Errorf("stats of sandbox %s: %w", i.id, err)
	}
	m := st.MemoryStats.Stats
	cache := int64(firstOf(m, "file", "total_cache", "cache")) // v2, then v1
	shmem := int64(firstOf(m, "shmem", "total_shmem"))
	used := int64(st.MemoryStats.Usage)
	u := driver.Usage{Time: time.Now(), CPUTime: time.Duration(st.CPUStats.CPUUsage.TotalUsage), CPUs: info.CPUs, MemLimit: info.Memory}
	// tmpfs pages (shmem) are the sandbox's files, not cache.
	u.MemCache = max(cache-shmem, 0)
	u.MemUsed = max(used-u.MemCache-shmem, 0)
	u.DiskUsed = shmem
	return u, nil
}

func firstOf(m map[string]uint64, keys ...string) uint64 {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v
		}
	}
	return 0
}
