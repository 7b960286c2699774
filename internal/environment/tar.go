package environment

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
)

// WriteTar writes the rootfs at dir as an uncompressed tar stream (owners,
// modes, symlinks and hard links kept), for `docker import` and the like.
func WriteTar(ctx context.Context, dir string, w io.Writer) error {
	return writeTar(ctx, dir, w, false)
}

// writeTar is WriteTar; with seed, the rootfs's home/user goes to
// homeseed.Dir instead, home/user staying an empty directory: a sandbox's
// home is a tmpfs mounted over home/user, which its agent fills from the
// seed (an image can't be bind-mounted from the host, as the docker and
// gVisor paths do). The rootfs's own entry at homeseed.Dir, if any, is
// left out.
func writeTar(ctx context.Context, dir string, w io.Writer, seed bool) error {
	seedDir := strings.TrimPrefix(homeseed.Dir, "/")
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
		name := rel
		if seed {
			if rel == seedDir {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if after, ok := strings.CutPrefix(rel, "home/user/"); ok {
				name = seedDir + "/" + after
			}
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
		h.Name = name
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
					seen[k] = name
				}
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if seed && rel == "home/user" && fi.IsDir() {
			// The seed's root: the home's own owner and mode.
			sh := *h
			sh.Name = seedDir + "/"
			if err := tw.WriteHeader(&sh); err != nil {
				return err
			}
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
