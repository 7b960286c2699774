package environment

import (
	"errors"
	"fmt"
	"io"
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

// readInRootfs reads the regular file rel of the rootfs, every symlink on
// the way resolved inside the rootfs (an image may link /etc/group
// elsewhere in itself), at most max bytes; a missing file is
// fs.ErrNotExist.
func readInRootfs(root, rel string, max int64) ([]byte, error) {
	h, err := pathrs.OpenInRoot(root, rel)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("rootfs /%s: %w", rel, os.ErrNotExist)
		}
		return nil, fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	defer h.Close()
	f, err := pathrs.Reopen(h, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("rootfs /%s: not a regular file", rel)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// existsInRootfs reports whether the entry rel of the rootfs exists (a
// symlink counts as itself).
func existsInRootfs(root, rel string) bool {
	d, err := rootfsDir(root, filepath.Dir(rel))
	if err != nil {
		return false
	}
	defer d.Close()
	var st unix.Stat_t
	return unix.Fstatat(int(d.Fd()), filepath.Base(rel), &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// mkdirInRootfs makes the directory rel of the rootfs (and what is missing
// above it) and sets its mode and owner.
func mkdirInRootfs(root, rel string, mode os.FileMode, uid, gid int) error {
	d, err := rootfsDir(root, rel)
	if err != nil {
		return err
	}
	defer d.Close()
	// The handle may be O_PATH: go through its /proc link, which names
	// exactly this inode.
	p := fmt.Sprintf("/proc/self/fd/%d", d.Fd())
	if err := os.Chown(p, uid, gid); err != nil {
		return fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	return nil
}

// createInRootfs replaces the entry rel of the rootfs with a new, empty
// regular file, open for writing; the caller sets its owner and mode.
func createInRootfs(root, rel string) (*os.File, error) {
	d, err := rootfsDir(root, filepath.Dir(rel))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	name := filepath.Base(rel)
	if err := removeAt(d, name); err != nil {
		return nil, fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// replaceSymlinkInRootfs replaces the entry rel with a symlink to target
// owned by uid:gid.
func replaceSymlinkInRootfs(root, rel, target string, uid, gid int) error {
	d, err := rootfsDir(root, filepath.Dir(rel))
	if err != nil {
		return err
	}
	defer d.Close()
	name := filepath.Base(rel)
	if err := removeAt(d, name); err != nil {
		return fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	if err := unix.Symlinkat(target, int(d.Fd()), name); err != nil {
		return fmt.Errorf("rootfs /%s: %w", rel, err)
	}
	return unix.Fchownat(int(d.Fd()), name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
}

// removeAt removes name in d: a file or link, or a directory tree (never
// following a symlink in it).
func removeAt(d *os.File, name string) error {
	err := unix.Unlinkat(int(d.Fd()), name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	// A directory: RemoveAll through the exact inode's /proc path resolves
	// no symlink of the rootfs (it walks with O_NOFOLLOW below).
	return os.RemoveAll(fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name))
}

// dirInRootfs reports whether rel resolves (inside the rootfs) to a
// directory that is itself not a symlink.
func dirInRootfs(root, rel string) bool {
	d, err := rootfsDir(root, filepath.Dir(rel))
	if err != nil {
		return false
	}
	defer d.Close()
	var st unix.Stat_t
	return unix.Fstatat(int(d.Fd()), filepath.Base(rel), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}
