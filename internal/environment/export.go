package environment

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// AgentPath is where images made for launchers that can't bind-mount the
// agent (kubernetes) carry it.
const AgentPath = "/opt/code-sandboxes/agent"

// ExtraFile is a host file added to an exported image.
type ExtraFile struct {
	Path     string // inside the image, absolute
	HostPath string
	Mode     int64
}

// Image returns the build as an OCI image: the rootfs as one layer (its
// /home/user moved to homeseed.Dir, for the agent to copy into the home
// tmpfs: writeTar), the extra files as a second, and a config that fits the sandbox contract
// (user 1000:100, /home/user, C.UTF-8, UTC).
func Image(ctx context.Context, b *Build, extra []ExtraFile) (v1.Image, error) {
	if b.Host {
		return nil, fmt.Errorf("%w: %s is a host environment: it has no rootfs to export", ErrInvalidSpec, b.Name)
	}
	rootfs, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(ctx, b.Rootfs(), pw, true)) }()
		return pr, nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, err
	}
	layers := []v1.Layer{rootfs}
	if len(extra) > 0 {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		dirs := map[string]bool{}
		for _, f := range extra {
			raw, err := os.ReadFile(f.HostPath)
			if err != nil {
				return nil, err
			}
			for d := path.Dir(f.Path); d != "/" && !dirs[d]; d = path.Dir(d) {
				dirs[d] = true
			}
			_ = tw.WriteHeader(&tar.Header{Name: f.Path[1:], Typeflag: tar.TypeReg, Mode: f.Mode, Size: int64(len(raw))})
			_, _ = tw.Write(raw)
		}
		for d := range dirs {
			_ = tw.WriteHeader(&tar.Header{Name: d[1:] + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		if err := tw.Close(); err != nil {
			return nil, err
		}
		raw := buf.Bytes()
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.User = "1000:100"
	cf.Config.WorkingDir = "/home/user"
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/user", "LANG=C.UTF-8", "TZ=UTC"}
	for k, v := range b.Env {
		cf.Config.Env = append(cf.Config.Env, k+"="+v)
	}
	cf.Config.Labels = map[string]string{"created-by": "code-sandboxes", "code-sandboxes.environment": b.Name, "code-sandboxes.build-id": b.ID}
	return mutate.ConfigFile(img, cf)
}

// ImageTag is the tag an environment's image carries on every variant:
// launches pin the build id, never a moving name.
func ImageTag(b *Build) string { return "code-sandboxes-env:" + b.ID }

// WriteImageTar writes the image (see Image) as a `docker save` tarball
// tagged tag, which `docker load`, `ctr images import` and `kind load` take.
func WriteImageTar(ctx context.Context, b *Build, tag string, extra []ExtraFile, w io.Writer) error {
	img, err := Image(ctx, b, extra)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("image tag %q: %w", tag, err)
	}
	return tarball.Write(ref, img, w)
}
