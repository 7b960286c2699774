package environment

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
)

// unpackImage flattens the base image (registry or tarball) into the rootfs.
func (b *builder) unpackImage(ctx context.Context) error {
	var img v1.Image
	var err error
	if b.spec.Base.Tarball != "" {
		img, err = tarball.ImageFromPath(b.spec.abs(b.spec.Base.Tarball), nil)
	} else {
		ref, perr := parseRef(b.spec.Base)
		if perr != nil {
			return perr
		}
		// Pin the digest that went into the id, whatever the tag says now.
		dref := ref.Context().Digest(b.in.ImageDigest)
		reg, rerr := registryFor(ctx, b.tenantPulls, b.loopback)
		if rerr != nil {
			return rerr
		}
		defer reg.close()
		img, err = remote.Image(dref, reg.opts...)
		if err != nil {
			return reg.pullErr(b.spec.Base.Image, err)
		}
		if err := b.extractImage(ctx, img); err != nil {
			var le *layerReadError
			if errors.As(err, &le) {
				return reg.pullErr(b.spec.Base.Image, err)
			}
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	return b.extractImage(ctx, img)
}

// extractImage unpacks img's layers into the rootfs.
func (b *builder) extractImage(ctx context.Context, img v1.Image) error {
	if cf, err := img.ConfigFile(); err == nil && cf.Architecture != "" && cf.Architecture != "amd64" && cf.OS == "linux" {
		return fmt.Errorf("the image is for %s/%s; sandboxes here run linux/amd64", cf.OS, cf.Architecture)
	}
	var total int64
	if layers, err := img.Layers(); err == nil {
		for _, l := range layers {
			if n, err := l.Size(); err == nil {
				total += n
			}
		}
	}
	rc := mutate.Extract(img) // layers applied in order, whiteouts honoured
	defer rc.Close()
	if err := os.MkdirAll(b.rootfs, 0o755); err != nil {
		return err
	}
	counter := b.p.bytes("unpack", total)
	defer counter.finish()
	return extractTar(ctx, io.TeeReader(pullReader{rc}, counter), b.rootfs)
}

// extractTar unpacks a tar stream under root. Every name and link target is
// resolved inside root (a hostile image can't write outside it through ".."
// or a symlink planted by an earlier entry); owners are kept when we may.
func extractTar(ctx context.Context, r io.Reader, root string) error {
	tr := tar.NewReader(r)
	asRoot := os.Geteuid() == 0
	type dirTime struct {
		path string
		t    time.Time
	}
	var dirs []dirTime
	// mutate.Extract emits the top layer first, so a hard link can arrive
	// before its target: links are made once every file is in place.
	var links []*tar.Header
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read image layer: %w", err)
		}
		rel := filepath.Clean("/" + h.Name)
		if rel == "/" {
			continue
		}
		// Resolve the parent inside root; the entry itself is created, not
		// followed.
		parent, err := securejoin.SecureJoin(root, filepath.Dir(rel))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return err
		}
		p := filepath.Join(parent, filepath.Base(rel))
		mode := os.FileMode(h.Mode & 0o7777)
		if fi, err := os.Lstat(p); err == nil && !(fi.IsDir() && h.Typeflag == tar.TypeDir) {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
				return err
			}
			dirs = append(dirs, dirTime{p, h.ModTime})
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			links = append(links, h)
			continue
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			if !asRoot {
				continue // device nodes need root; /dev is mounted fresh anyway
			}
			kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[h.Typeflag]
			if err := unix.Mknod(p, kind|uint32(mode), int(unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor)))); err != nil {
				return err
			}
		default:
			continue // pax headers and the like carry no file
		}
		if asRoot {
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				return err
			}
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
		}
		_ = unix.Lutimes(p, []unix.Timeval{unix.NsecToTimeval(h.ModTime.UnixNano()), unix.NsecToTimeval(h.ModTime.UnixNano())})
	}
	for _, h := range links {
		target, err := securejoin.SecureJoin(root, filepath.Clean("/"+h.Linkname))
		if err != nil {
			return err
		}
		parent, err := securejoin.SecureJoin(root, filepath.Dir(filepath.Clean("/"+h.Name)))
		if err != nil {
			return err
		}
		p := filepath.Join(parent, filepath.Base(h.Name))
		if fi, err := os.Lstat(target); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("hard link %s → %s: the target is not a regular file in the image", h.Name, h.Linkname)
		}
		_ = os.Remove(p)
		if err := os.Link(target, p); err != nil {
			return fmt.Errorf("hard link %s → %s: %w", h.Name, h.Linkname, err)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- { // children changed their parents' mtimes
		_ = os.Chtimes(dirs[i].path, dirs[i].t, dirs[i].t)
	}
	return nil
}
