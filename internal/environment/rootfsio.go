package environment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"
)

// Host-side writes into a rootfs go through these: the rootfs comes from
// an image, whose symlinks (etc -> /root, tmp -> /) must never redirect a
// write of ours (as host root) out of it. Every path component is resolved
// inside the rootfs (filepath-securejoin's pathrs-lite: openat2 with
// RESOLVE_IN_ROOT where the kernel has it, a checked walk elsewhere), and
// the last one is created with O_NOFOLLOW|O_EXCL after removing what was
// there.

// rootfsDir opens the directory rel of the rootfs, creating what is missing.
func rootfsDir(root, rel string) (*os.File, error) {
	rf, err := os.Open(root)
	if err != nil {
		return nil, err
	}
	defer rf.Close()
	d, err := pathrs.MkdirAllHandle(rf, rel, 0o755)
	if err != nil {
		return nil, fmt.Errorf("rootfs directory /%s: %w", rel, err)
	}
	return d, nil
}

// writeInRootfs replaces the file rel of the rootfs with data.
func writeInRootfs(root, rel string, data []byte, mode os.FileMode) error {
	d, err := rootfsDir(root, filepath.Dir(rel))
	if err != nil {
		return err
	}
	defer d.Close()
	name := filepath.Base(rel)
	if err := unix.Unlinkat(int(d.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	_, werr := f.Write(data)
	cerr := f.Chmod(mode) // the open's mode is masked by umask
	if err := errors.Join(werr, cerr, f.Close()); err != nil {
		return fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	return nil
}

// removeInRootfs removes the entry rel of the rootfs (never what a symlink
// there points at).
func removeInRootfs(root, rel string) error {
	d, err := rootfsDir(root, filepath.Dir(rel))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Unlinkat(int(d.Fd()), filepath.Base(rel), 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// symlinkInRootfs makes rel a symlink to target (which is the image's
// business: it is resolved inside the sandbox, never by us).
func symlinkInRootfs(root, rel, target string) error {
	d, err := rootfsDir(root, filepath.Dir(rel))
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Symlinkat(target, int(d.Fd()), filepath.Base(rel))
}
