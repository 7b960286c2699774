//go:build !linux

package environment

import (
	"fmt"
	"os"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Host-side writes into a rootfs need Linux: rootfsio_linux.go resolves
// every path inside the rootfs with openat2 (filepath-securejoin's
// pathrs-lite, Linux only) and *at calls, and the rootfs itself comes from
// a build that needs namespaces and an overlay. Elsewhere these refuse,
// so the package (and the root package, which imports it) still builds
// for macOS, where the e2b variant runs.

// errNeedsLinux is ErrNotSupported (errors.Is) with the reason.
var errNeedsLinux = fmt.Errorf("%w: building environments needs Linux (namespaces, overlay rootfs); elsewhere use the e2b variant (E2B cloud or a Linux host running serve)", sberr.ErrNotSupported)

func rootfsErr(rel string) error { return fmt.Errorf("rootfs /%s: %w", rel, errNeedsLinux) }

func writeInRootfs(root, rel string, data []byte, mode os.FileMode) error {
	return rootfsErr(rel)
}

func removeInRootfs(root, rel string) error { return rootfsErr(rel) }

func symlinkInRootfs(root, rel, target string) error { return rootfsErr(rel) }

func readInRootfs(root, rel string, max int64) ([]byte, error) { return nil, rootfsErr(rel) }

func existsInRootfs(root, rel string) bool { return false }

func mkdirInRootfs(root, rel string, mode os.FileMode, uid, gid int) error {
	return rootfsErr(rel)
}

func createInRootfs(root, rel string) (*os.File, error) { return nil, rootfsErr(rel) }

func replaceSymlinkInRootfs(root, rel, target string, uid, gid int) error {
	return rootfsErr(rel)
}

func dirInRootfs(root, rel string) bool { return false }
