//go:build linux

package environment

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// shareWithBase turns every regular file of rootfs that is still the one
// copied from base (same content, mode, owner, times and extended
// attributes) into a hard link to base's file, and returns the bytes saved.
//
// Why: an environment built on another (every E2B template on serve starts
// from "python") began as a full copy of its base, 1.3 GB each, and a
// template's steps usually change a few files. Builds are immutable once
// made and every variant mounts them read-only, so sharing inodes between
// a build and its base is safe; a later Force rebuild or removal of the
// base only drops one of the links.
//
// base may hold anything an image or a template's steps put there, so every
// lookup in it is resolved beneath it without following any symlink
// (openat2), and only regular files are opened for reading; a kernel
// without openat2 gets no sharing, never a weaker lookup. rootfs is our own
// work directory, walked without following symlinks, after the build's
// jail is gone (nothing else writes there).
func shareWithBase(base, rootfs string) (int64, error) {
	bfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("share with base: %w", err)
	}
	defer unix.Close(bfd)
	var saved int64
	buf1, buf2 := make([]byte, 1<<20), make([]byte, 1<<20)
	err = filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil // unreadable parts and non-files are simply not shared
		}
		rel, err := filepath.Rel(rootfs, p)
		if err != nil {
			return nil
		}
		n, err := shareOne(bfd, p, rel, buf1, buf2)
		if errors.Is(err, unix.ENOSYS) {
			return err // no openat2: stop, nothing shared beyond this
		}
		saved += n
		return nil
	})
	if errors.Is(err, unix.ENOSYS) {
		return saved, nil
	}
	return saved, err
}

// shareOne links base's rel over the file p when they are the same; it
// returns the size saved, 0 when they differ.
func shareOne(bfd int, p, rel string, buf1, buf2 []byte) (int64, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || st.Size == 0 {
		return 0, nil // hard links within the build keep their own inode
	}
	pfd, err := unix.Openat2(bfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return 0, err
		}
		return 0, nil
	}
	defer unix.Close(pfd)
	var bst unix.Stat_t
	if err := unix.Fstat(pfd, &bst); err != nil || bst.Mode&unix.S_IFMT != unix.S_IFREG ||
		bst.Mode != st.Mode || bst.Uid != st.Uid || bst.Gid != st.Gid || bst.Size != st.Size ||
		bst.Mtim != st.Mtim || bst.Ino == st.Ino && bst.Dev == st.Dev {
		return 0, nil
	}
	bproc := "/proc/self/fd/" + strconv.Itoa(pfd)
	if !sameXattrs(bproc, p) {
		return 0, nil
	}
	same, err := sameContent(bproc, p, buf1, buf2)
	if err != nil || !same {
		return 0, nil
	}
	dir, name := filepath.Split(p)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil
	}
	defer unix.Close(dfd)
	tmp := ".cs-share-" + name
	if len(tmp) > 255 {
		tmp = ".cs-share-" + strconv.FormatUint(st.Ino, 36)
	}
	_ = unix.Unlinkat(dfd, tmp, 0)
	// AT_EMPTY_PATH links the very inode we compared (needs
	// CAP_DAC_READ_SEARCH: builds run as root); a path would be looked up
	// again.
	if err := unix.Linkat(pfd, "", dfd, tmp, unix.AT_EMPTY_PATH); err != nil {
		return 0, nil
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return 0, nil
	}
	return st.Size, nil
}

// sameContent compares two regular files byte for byte.
func sameContent(a, b string, buf1, buf2 []byte) (bool, error) {
	// a is base's file through its /proc/self/fd link (checked regular),
	// which O_NOFOLLOW would refuse; b is ours, checked regular too.
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.OpenFile(b, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	for {
		n1, err1 := io.ReadFull(fa, buf1)
		n2, err2 := io.ReadFull(fb, buf2)
		if n1 != n2 || !bytes.Equal(buf1[:n1], buf2[:n2]) {
			return false, nil
		}
		end1 := errors.Is(err1, io.EOF) || errors.Is(err1, io.ErrUnexpectedEOF)
		end2 := errors.Is(err2, io.EOF) || errors.Is(err2, io.ErrUnexpectedEOF)
		switch {
		case end1 && end2:
			return true, nil
		case end1 != end2:
			return false, nil
		case err1 != nil:
			return false, err1
		case err2 != nil:
			return false, err2
		}
	}
}

// sameXattrs: file capabilities, ACLs and labels must match too, or a
// shared inode would give a file attributes its build step removed.
func sameXattrs(a, b string) bool {
	la, ok := xattrs(a)
	if !ok {
		return false
	}
	lb, ok := xattrs(b)
	if !ok || len(la) != len(lb) {
		return false
	}
	for k, v := range la {
		if w, ok := lb[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func xattrs(p string) (map[string][]byte, bool) {
	names := make([]byte, 64<<10)
	n, err := unix.Listxattr(p, names)
	if err != nil {
		return nil, errors.Is(err, unix.ENOTSUP)
	}
	m := map[string][]byte{}
	for _, k := range bytes.Split(names[:n], []byte{0}) {
		if len(k) == 0 {
			continue
		}
		v := make([]byte, 64<<10)
		vn, err := unix.Getxattr(p, string(k), v)
		if err != nil {
			return nil, false
		}
		m[string(k)] = v[:vn]
	}
	return m, true
}
