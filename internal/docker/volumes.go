package docker

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// checkVolumeSource: a volume's source is an absolute, existing host
// directory, not a symlink (the engine would bind what it points at).
func checkVolumeSource(src string) error {
	if !filepath.IsAbs(src) || filepath.Clean(src) != src {
		return fmt.Errorf("%w: volume source %q: give an absolute, clean host directory", sberr.ErrInvalidConfig, src)
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("%w: volume source %q: %v", sberr.ErrInvalidConfig, src, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: volume source %q is not a directory (symlinks are refused: give the directory itself)", sberr.ErrInvalidConfig, src)
	}
	return nil
}
