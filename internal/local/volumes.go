package local

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// checkVolumes checks spec.Volumes on this host: each Source an absolute,
// existing directory (not a symlink: the bind takes the path as it is
// then), and the isolation one that binds them (gVisor's sandboxes would
// need a gofer mount each; refused, not dropped).
func checkVolumes(spec driver.Spec, isolation string) error {
	if len(spec.Volumes) == 0 {
		return nil
	}
	if isolation == IsolationGVisor {
		return fmt.Errorf("%w: volumes with isolation gvisor; use the namespaces isolation (the default) for sandboxes that mount volumes", sberr.ErrNotSupported)
	}
	for _, v := range spec.Volumes {
		if !filepath.IsAbs(v.Source) || filepath.Clean(v.Source) != v.Source {
			return fmt.Errorf("%w: volume source %q: give an absolute, clean host directory", sberr.ErrInvalidConfig, v.Source)
		}
		fi, err := os.Lstat(v.Source)
		if err != nil {
			return fmt.Errorf("%w: volume source %q: %v", sberr.ErrInvalidConfig, v.Source, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: volume source %q is not a directory (symlinks are refused: give the directory itself)", sberr.ErrInvalidConfig, v.Source)
		}
	}
	return nil
}
