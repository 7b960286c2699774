package environment

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// resolveInputs reads everything the spec points at, so the id covers the
// content and the build uses exactly what was hashed.
func (st *Store) resolveInputs(ctx context.Context, s *Spec) (*inputs, error) {
	in := &inputs{Files: map[string][]byte{}, Archives: map[int]string{}}
	for i, st := range s.Steps {
		if st.Copy == nil {
			continue
		}
		h, err := hashArchive(st.Copy.archivePath(s))
		if err != nil {
			return nil, fmt.Errorf("%w: steps[%d].copy.archive: %w", ErrInvalidSpec, i, err)
		}
		in.Archives[i] = h
	}
	if s.Base.Environment != "" {
		b, err := st.Resolve(s.Base.Environment)
		if err != nil {
			return nil, fmt.Errorf("base.environment: %w", err)
		}
		if b.Host {
			return nil, fmt.Errorf("%w: base.environment %s is a host environment, which has no rootfs to start from", ErrInvalidSpec, s.Base.Environment)
		}
		in.BaseBuild = b
	}
	if s.Base.Debian != "" {
		in.Mirror = s.Base.Mirror
		if in.Mirror == "" {
			in.Mirror = DefaultMirror()
		}
	}
	if s.Base.Image != "" {
		ref, err := parseRef(s.Base)
		if err != nil {
			return nil, err
		}
		if d, ok := ref.(name.Digest); ok {
			in.ImageDigest = d.DigestStr()
		} else {
			reg, err := registryFor(ctx, st.TenantPulls, st.LoopbackPorts)
			if err != nil {
				return nil, err
			}
			desc, err := remote.Head(ref, reg.opts...)
			reg.close()
			if err != nil {
				return nil, reg.pullErr(s.Base.Image, err)
			}
			in.ImageDigest = desc.Digest.String()
		}
	}
	if s.Base.Tarball != "" {
		f, err := os.Open(s.abs(s.Base.Tarball))
		if err != nil {
			return nil, fmt.Errorf("%w: base tarball: %w", ErrInvalidSpec, err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: base tarball: %w", ErrInvalidSpec, err)
		}
		in.Tarball = hex.EncodeToString(h.Sum(nil))
	}
	if s.Pip != nil {
		lock, err := readBounded(s.abs(s.Pip.Lock), maxLockBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: pip.lock: %w", ErrInvalidSpec, err)
		}
		if err := checkLock(lock); err != nil {
			return nil, err
		}
		in.Lock = lock
	}
	for i, f := range s.Files {
		if f.Source == "" {
			in.Files[f.Path] = []byte(f.Content)
			continue
		}
		b, err := readBounded(s.abs(f.Source), maxFileBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: files[%d].source: %w", ErrInvalidSpec, i, err)
		}
		in.Files[f.Path] = b
	}
	return in, nil
}

func parseRef(b Base) (name.Reference, error) {
	var opts []name.Option
	if b.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(b.Image, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: base.image %q: %w", ErrInvalidSpec, b.Image, err)
	}
	return ref, nil
}

func readBounded(p string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, max)
	}
	return b, nil
}

// DefaultMirror is the first Debian archive in the machine's apt sources
// (one-line and deb822 formats), else deb.debian.org.
func DefaultMirror() string {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append([]string{"/etc/apt/sources.list"}, files...)
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			var uris []string
			switch {
			case len(fields) >= 2 && fields[0] == "URIs:":
				uris = fields[1:]
			case len(fields) >= 3 && fields[0] == "deb":
				for _, x := range fields[1:] {
					if strings.Contains(x, "://") {
						uris = append(uris, x)
						break
					}
				}
			}
			for _, u := range uris {
				if strings.Contains(u, "debian") && !strings.Contains(u, "security") {
					f.Close()
					return strings.TrimRight(u, "/")
				}
			}
		}
		f.Close()
	}
	return "http://deb.debian.org/debian"
}

// Builtin returns the spec of a built-in environment.
func Builtin(name string) (*Spec, bool) {
	if name != "python" {
		return nil, false
	}
	return &Spec{
		Name:        "python",
		Description: "Debian bookworm with python3, numpy, pandas and matplotlib, node for the javascript kernel (the user uid 1000)",
		Base:        Base{Debian: "bookworm"},
		Apt: []string{"python3", "python-is-python3", "python3-numpy", "python3-pandas", "python3-matplotlib", "python3-pip",
			"nodejs", "ca-certificates", "tzdata"},
	}, true
}
