package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/units"
)

// checkpointMargin is free space asked for beyond the sandbox's memory: the
// image's own metadata and what the filesystem keeps for itself.
const checkpointMargin = 16 << 20

// checkSpaceForCheckpoint refuses a pause that the state directory's disk
// can't hold, before anything is asked of the agent. It matters because
// runsc ends the sandbox on a failed checkpoint: a full disk would lose the
// sandbox the caller only wanted to pause (seen: a full disk in CI).
// The image is at most about the sandbox's memory in use (runsc compresses
// it, so usually much less; the bound errs on keeping the sandbox) (gVisor keeps its tmpfs in
// that memory too); with no cgroup to read, the memory limit stands in.
func (g *gvisorSandbox) checkSpaceForCheckpoint(img string, limit int64) error {
	need := int64(-1)
	for _, d := range g.cgroups {
		if n, ok := readInt(d, "memory.current"); ok {
			need = n
			break
		}
		if n, ok := readInt(d, "memory.usage_in_bytes"); ok {
			need = n
			break
		}
	}
	if need < 0 {
		if limit <= 0 {
			return nil // nothing to go by: runsc's own error will say
		}
		need = limit
	}
	need += checkpointMargin
	free, dir, err := freeBytes(img)
	if err != nil {
		return nil // can't tell: let runsc try
	}
	if free < need {
		// Plain text: it reaches the caller through the pause result
		// file, and Pause makes it an ErrUnavailable.
		return fmt.Errorf("a checkpoint of this sandbox needs up to %s of disk and %s has %s free; free some space there or point %s at a larger disk; the sandbox keeps running",
			units.Bytes(need), dir, units.Bytes(free), stateDirEnv)
	}
	return nil
}

// freeBytes is what an unprivileged writer may still use on the disk of p's
// nearest existing ancestor.
func freeBytes(p string) (int64, string, error) {
	for d := filepath.Clean(p); ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		err := unix.Statfs(d, &st)
		if err == nil {
			return int64(st.Bavail) * int64(st.Bsize), d, nil // Bsize is uint32 on macOS
		}
		if !errors.Is(err, os.ErrNotExist) || d == "/" {
			return 0, d, err
		}
	}
}
