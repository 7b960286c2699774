package homeseed

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxSeedDepth bounds the nesting of the directories copied.
const maxSeedDepth = 128

// OpenRootfsHome opens the rootfs's home/user, each component without
// following a symlink; -1 when the rootfs has none.
func OpenRootfsHome(rootfsFD int) (int, error) {
	fd := rootfsFD
	for i, name := range []string{"home", "user"} {
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if i > 0 {
			unix.Close(fd)
		}
		switch {
		case errors.Is(err, unix.ENOENT):
			return -1, nil
		case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
			return -1, fmt.Errorf("the environment's /home/user: /%s is not a directory (a symlink?); the sandbox's home is a copy of its /home/user", path.Join([]string{"home", "user"}[:i+1]...))
		case err != nil:
			return -1, fmt.Errorf("the environment's /home/user: %w", err)
		}
		fd = next
	}
	return fd, nil
}

type homeSeeder struct {
	Limits
	used    int64
	entries int64
	dry     bool // measure only (Check)
}

// tooBig says the environment's home doesn't fit the sandbox's.
func (s *homeSeeder) tooBig(rel string) error {
	hint := s.Hint
	if hint == "" {
		hint = "more Memory: the default home is half of it up to 1 GiB"
	}
	return fmt.Errorf("the environment's /home/user %s (a %d MiB tmpfs of %d inodes; %s and what came before take more): give the sandbox a larger home (%s) or leave less in the environment's /home/user", TooBig, s.Bytes>>20, s.Inodes, rel, hint)
}

// Copy copies the directory src (an fd, closed here) into dst, the
// sandbox's fresh home, within lim.
func Copy(src int, dst string, lim Limits) error {
	s := &homeSeeder{Limits: lim}
	return s.copyDir(src, dst, ".", 0)
}

// Check measures the seed directory src as Copy would copy it and says,
// as Copy would, when it doesn't fit lim: a launcher whose agent does the
// copy (gVisor) refuses the sandbox with the reason before starting it. A
// missing src fits.
func Check(src string, lim Limits) error {
	fd, err := openSeed(src)
	if fd < 0 || err != nil {
		return err
	}
	s := &homeSeeder{Limits: lim, dry: true}
	return s.copyDir(fd, "", ".", 0)
}

// openSeed opens the seed directory src without following a symlink; -1
// and no error when there is none.
func openSeed(src string) (int, error) {
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("the environment's /home/user (at %s): %w", src, err)
	}
	return fd, nil
}

// FromDir copies the seed directory src into dst, the sandbox's home
// tmpfs, within that tmpfs's own size and inodes (statfs) and lim where
// set lower; a missing src is an environment without a home to seed.
func FromDir(src, dst string, lim Limits) error {
	fd, err := openSeed(src)
	if fd < 0 || err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("the sandbox's home %s: %w", dst, err)
	}
	bytes, inodes := int64(st.Blocks)*st.Bsize, int64(st.Files)
	if lim.Bytes <= 0 || (bytes > 0 && bytes < lim.Bytes) {
		lim.Bytes = bytes
	}
	if lim.Inodes <= 0 || (inodes > 0 && inodes < lim.Inodes) {
		lim.Inodes = inodes
	}
	return Copy(fd, dst, lim)
}

// blocks is what n bytes take on a tmpfs: whole pages.
func blocks(n int64) int64 { return (n + 4095) &^ 4095 }

func (s *homeSeeder) charge(rel string, n int64) error {
	s.used += blocks(n)
	s.entries++
	if (s.Bytes > 0 && s.used > s.Bytes) || (s.Inodes > 0 && s.entries > s.Inodes) {
		return s.tooBig(rel)
	}
	return nil
}

func (s *homeSeeder) copyDir(src int, dst, rel string, depth int) error {
	d := os.NewFile(uintptr(src), rel)
	defer d.Close()
	if depth > maxSeedDepth {
		return fmt.Errorf("the environment's /home/user/%s: directories nested more than %d deep", rel, maxSeedDepth)
	}
	for {
		names, err := d.Readdirnames(256)
		for _, name := range names {
			if err := s.copyEntry(src, name, filepath.Join(dst, name), path.Join(rel, name), depth); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the environment's /home/user/%s: %w", rel, err)
		}
	}
}

func (s *homeSeeder) copyEntry(dir int, name, dst, rel string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("the environment's /home/user/%s: %w", rel, err)
	}
	perm := uint32(st.Mode) & 0o777 // no set-id or sticky bits
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := s.charge(rel, 4096); err != nil {
			return err
		}
		sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return unreadable(rel, st.Mode, err)
		}
		if s.dry {
			return s.copyDir(sub, "", rel, depth+1)
		}
		// Writable by us while it fills; its own mode after.
		if err := os.Mkdir(dst, 0o700); err != nil {
			unix.Close(sub)
			return s.writeErr(rel, err)
		}
		if err := s.copyDir(sub, dst, rel, depth+1); err != nil {
			return err
		}
		return os.Chmod(dst, os.FileMode(perm))
	case unix.S_IFREG:
		if err := s.charge(rel, st.Size); err != nil || s.dry {
			return err
		}
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return unreadable(rel, st.Mode, err)
		}
		in := os.NewFile(uintptr(fd), rel)
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, os.FileMode(perm))
		if err != nil {
			return s.writeErr(rel, err)
		}
		// No more than the size charged: a file can't grow the copy past
		// the bound by growing meanwhile.
		_, err = io.Copy(out, io.LimitReader(in, st.Size))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return s.writeErr(rel, err)
		}
		return os.Chmod(dst, os.FileMode(perm))
	case unix.S_IFLNK:
		if err := s.charge(rel, 0); err != nil || s.dry {
			return err
		}
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return fmt.Errorf("the environment's /home/user/%s: %w", rel, err)
		}
		if err := os.Symlink(string(buf[:n]), dst); err != nil {
			return s.writeErr(rel, err)
		}
		return nil
	}
	return nil // devices, fifos, sockets: not a home's content
}

func unreadable(rel string, mode uint32, err error) error {
	if errors.Is(err, unix.EACCES) {
		return fmt.Errorf("the environment's /home/user/%s (mode %o) can't be read by the sandbox's user, who copies the home into every sandbox: make it readable by others (chmod o+r) in the environment", rel, mode&0o7777)
	}
	return fmt.Errorf("the environment's /home/user/%s: %w", rel, err)
}

func (s *homeSeeder) writeErr(rel string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return s.tooBig(rel)
	}
	return fmt.Errorf("copying the environment's /home/user/%s into the sandbox: %w", rel, err)
}
