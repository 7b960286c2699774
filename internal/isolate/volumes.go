//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxVolumes bounds Spec.Volumes (each one an fd in the release message).
const maxVolumes = 16

// openVolume validates a volume's source and target and opens the source
// (O_PATH) for reopenInChild.
func openVolume(v Bind) (*os.File, error) {
	t := v.Target
	if !strings.HasPrefix(t, "/") || filepath.Clean(t) != t || t == "/" {
		return nil, fmt.Errorf("isolate: volume target %q: give an absolute, clean path other than /", t)
	}
	fd, err := unix.Open(v.Source, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("isolate: volume source %s: %w", v.Source, err)
	}
	return os.NewFile(uintptr(fd), v.Source), nil
}

// bindVolumes binds each volume (cfg.VolumeFDs, opened by the parent in our
// mount namespace) at its target under the new root nr, read-write, nosuid
// and nodev. The target's missing directories are made on the sandbox's own
// tmpfs mounts; a symlink on the way is refused (it could lead the bind out
// of the new root); an empty read-only directory of the rootfs (/mnt) gets
// a small tmpfs of its own to hold the mount point.
func bindVolumes(nr string, cfg *childConfig) error {
	defer func() {
		for _, fd := range cfg.VolumeFDs {
			unix.Close(fd)
		}
	}()
	if len(cfg.VolumeFDs) != len(cfg.Volumes) {
		return fmt.Errorf("volumes: got %d sources for %d volumes", len(cfg.VolumeFDs), len(cfg.Volumes))
	}
	for i, v := range cfg.Volumes {
		dst, err := volumeMountPoint(nr, v.Target)
		if err != nil {
			return fmt.Errorf("volume at %s: %w", v.Target, err)
		}
		if err := mount("/proc/self/fd/"+strconv.Itoa(cfg.VolumeFDs[i]), dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("volume at %s: %w", v.Target, err)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(dst, &st); err != nil {
			return fmt.Errorf("volume at %s: statfs: %w", v.Target, err)
		}
		// A bind remount in a user namespace must keep the flags the host
		// locked on the source (noexec, atime).
		keep := uintptr(st.Flags) & (unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
		if err := mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV|keep, ""); err != nil {
			return fmt.Errorf("volume at %s: %w", v.Target, err)
		}
	}
	return nil
}

// volumeMountPoint makes the directory target under nr, one component at a
// time, never through a symlink.
func volumeMountPoint(nr, target string) (string, error) {
	cur := nr
	for _, c := range strings.Split(strings.TrimPrefix(target, "/"), "/") {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("invalid path component %q", c)
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		switch {
		case err == nil && fi.Mode()&os.ModeSymlink != 0:
			return "", fmt.Errorf("%s is a symlink in the image; mount the volume at a path without one", strings.TrimPrefix(next, nr))
		case err == nil && !fi.IsDir():
			return "", fmt.Errorf("%s is a file in the image; mount the volume elsewhere", strings.TrimPrefix(next, nr))
		case err == nil:
		case errors.Is(err, os.ErrNotExist):
			err = os.Mkdir(next, 0o755)
			if errors.Is(err, unix.EROFS) && cur != nr && emptyDir(cur) {
				// An empty directory of the read-only image (/mnt): a tmpfs
				// of its own holds the mount point, hiding nothing.
				if err = mount("tmpfs", cur, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=65536,nr_inodes=64"); err == nil {
					err = os.Mkdir(next, 0o755)
				}
			}
			if errors.Is(err, unix.EROFS) {
				return "", fmt.Errorf("%s is in the image's read-only files; mount the volume under /mnt, /home/user or a new top-level directory", strings.TrimPrefix(cur, nr))
			}
			if err != nil {
				return "", err
			}
		default:
			return "", err
		}
		cur = next
	}
	return cur, nil
}

// emptyDir reports whether dir has no entries.
func emptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return errors.Is(err, io.EOF)
}
