//go:build !linux

package environment

import (
	"context"
	"io"
	"os"
)

// A build runs its steps in a jail made of Linux namespaces over an
// idmapped overlay of the rootfs (jail.go), and shares files with its base
// through openat2 (share.go): none of it exists elsewhere. Build refuses
// up front (checkBuildSupport) with errNeedsLinux; the rest only lets the
// package build.

func checkBuildSupport() error { return errNeedsLinux }

// mntDetach: no build mounts anything here, so removeTree finds nothing
// to unmount (mountsBelow reads Linux's /proc/self/mountinfo).
const mntDetach = 0

type jail struct{}

func newJail(storeDir, work, rootfs string, loopback []int, logw io.Writer) (*jail, error) {
	return nil, errNeedsLinux
}

func (j *jail) run(ctx context.Context, b *builder, uid, gid int, workdir string, env, argv []string) error {
	return errNeedsLinux
}

func (j *jail) close() {}

func shareWithBase(base, rootfs string) (int64, error) { return 0, errNeedsLinux }

// rootfsDir: see rootfsio_other.go.
func rootfsDir(root, rel string) (*os.File, error) { return nil, rootfsErr(rel) }
