package environment

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// WriteTar writes the rootfs at dir as an uncompressed tar stream (owners,
// modes, symlinks and hard links kept), for `docker import` and the like.
func WriteTar(ctx context.Context, dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", "" // numeric ids only: the host's names mean nothing inside
		// Access and change times change when anything reads the rootfs;
		// image digests are computed on one pass and written on another,
		// so they must not be in the stream.
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
			if fi.Mode().IsRegular() && st.Nlink > 1 {
				k := inode{uint64(st.Dev), st.Ino}
				if first, ok := seen[k]; ok {
					h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
				} else {
					seen[k] = rel
				}
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, h.Size)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
