//go:build !localonly

package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
)

// serveVolumes are serve's flags for E2B volumes (internal/e2bserver's
// volumes.go).
type serveVolumes struct {
	dir, size string
	max       int
}

func (v *serveVolumes) register(f *pflag.FlagSet) {
	f.StringVar(&v.dir, "volume-dir", "", "where E2B volumes are kept, a directory per volume (\"\" = e2b-volumes beside the environments)")
	f.StringVar(&v.size, "volume-size", "1G", "the size of each E2B volume, e.g. 512M or 10G: a file system of its own (a sparse, loop-mounted ext4 image), so writes beyond fail (ENOSPC in the sandbox, 413 through the API) and never fill the host's disk")
	f.IntVar(&v.max, "max-volumes", e2bserver.DefaultMaxVolumes, "most E2B volumes a team keeps (each up to --volume-size on disk)")
}

// apply sets o's volume options from the flags.
func (v *serveVolumes) apply(o *e2bserver.Options) error {
	size, err := parseSize(v.size)
	if err == nil && size <= 0 {
		err = fmt.Errorf("give a size such as 1G (there is no unlimited: a volume could fill the disk)")
	}
	if err != nil {
		return fmt.Errorf("--volume-size: %w", err)
	}
	if v.max <= 0 {
		return fmt.Errorf("--max-volumes %d: give 1 or more", v.max)
	}
	o.VolumeDir, o.VolumeSize, o.MaxVolumes = v.dir, size, v.max
	return nil
}
