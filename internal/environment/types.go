// Package environment builds and stores environments: named, content-addressed
// root filesystems made from a small YAML spec (a base, apt packages, a
// hash-pinned pip lock, extra files, env vars). A build's id is the SHA-256 of
// the normalised spec and the content of every input it names; a name points
// at a build id, and launches always pin the id, so a sandbox never runs a
// half-built or silently changed image.
package environment

import (
	"errors"
	"path/filepath"
	"time"
)

// Errors callers can match with errors.Is.
var (
	// ErrNotFound: no build by that name or id in the store.
	ErrNotFound = errors.New("environment not found")
	// ErrInvalidSpec: the spec file is malformed or asks for something that
	// can't be built; the message says what to change.
	ErrInvalidSpec = errors.New("invalid environment spec")
	// ErrBuildFailed: a build step failed; the message carries the step and
	// the tail of its output.
	ErrBuildFailed = errors.New("environment build failed")
)

// Spec is an environment spec file.
type Spec struct {
	// Name is a DNS-1123 label (lowercase letters, digits, '-').
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	Base        Base   `yaml:"base" json:"base"`
	// Apt packages installed with apt-get (or, on a debian base, at bootstrap).
	Apt []string `yaml:"apt,omitempty" json:"apt,omitempty"`
	// Pip installs a requirements lock with --require-hashes.
	Pip *Pip `yaml:"pip,omitempty" json:"pip,omitempty"`
	// Files are written into the rootfs after packages.
	Files []File `yaml:"files,omitempty" json:"files,omitempty"`
	// Env is set for every kernel and command in sandboxes of this
	// environment (the user's Config.Env wins on conflict).
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// Steps run in order after packages and files (E2B template steps).
	Steps []Step `yaml:"steps,omitempty" json:"steps,omitempty"`

	// dir is where the spec file lives: relative paths resolve against it.
	dir string
}

// Base is where the rootfs starts from; exactly one field is set.
type Base struct {
	// Debian is a Debian suite (bookworm) bootstrapped from Mirror.
	Debian string `yaml:"debian,omitempty" json:"debian,omitempty"`
	// Mirror is the apt mirror; "" = the first Debian mirror in the
	// machine's apt sources, else http://deb.debian.org/debian.
	Mirror string `yaml:"mirror,omitempty" json:"mirror,omitempty"`
	// Image is an OCI image reference pulled from its registry.
	Image string `yaml:"image,omitempty" json:"image,omitempty"`
	// Insecure allows a plain-HTTP registry for Image.
	Insecure bool `yaml:"insecure,omitempty" json:"insecure,omitempty"`
	// Tarball is an image tarball (docker save format) on disk.
	Tarball string `yaml:"tarball,omitempty" json:"tarball,omitempty"`
	// Environment starts from another build in the same store (a name or
	// build id), copied: a lock of extra packages over "python", say.
	Environment string `yaml:"environment,omitempty" json:"environment,omitempty"`
	// Host uses the host's system directories, as the local variant does
	// without an environment; only Env may be added on top.
	Host bool `yaml:"host,omitempty" json:"host,omitempty"`
}

// Pip is a hash-pinned requirements lock.
type Pip struct {
	// Lock is a requirements file where every line pins ==version and
	// carries --hash=sha256:…; a path relative to the spec file.
	Lock string `yaml:"lock" json:"lock"`
	// Index is the package index URL ("" = pip's default).
	Index string `yaml:"index,omitempty" json:"index,omitempty"`
}

// File is one file written into the rootfs.
type File struct {
	Path    string `yaml:"path" json:"path"`
	Content string `yaml:"content,omitempty" json:"content,omitempty"`
	// Source is a file on disk, relative to the spec file.
	Source string `yaml:"source,omitempty" json:"source,omitempty"`
	// Mode is octal, default 0644.
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
}

// Build is one finished build in the store.
type Build struct {
	ID          string            `json:"id"` // 64 hex digits
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Base        string            `json:"base"` // human-readable: "debian bookworm", "image …"
	CreatedAt   time.Time         `json:"created_at"`
	SizeBytes   int64             `json:"size_bytes"`
	Env         map[string]string `json:"env,omitempty"`
	// Workdir and User are where and as whom the last workdir and user
	// steps left off; recorded for clients that ask (E2B's template API).
	Workdir string `json:"workdir,omitempty"`
	User    string `json:"user,omitempty"`
	// Host: no rootfs of its own; the host's system directories are the root.
	Host bool `json:"host,omitempty"`
	// Dir is the build's directory in the store.
	Dir string `json:"-"`
}

// Rootfs is the build's root filesystem ("" for a host build). It is
// complete: /usr/bin/python3, /etc/passwd with user 1000, and the mount
// points /home/user, /files, /tmp, /proc, /dev exist.
func (b *Build) Rootfs() string {
	if b.Host {
		return ""
	}
	return filepath.Join(b.Dir, "rootfs")
}

// ShortID is the first 12 hex digits of the id, for display.
func (b *Build) ShortID() string {
	if len(b.ID) < 12 {
		return b.ID
	}
	return b.ID[:12]
}

// The ranges builds use: 1024 slots of 65536 ids from 0x60000000, below
// the local variant's per-sandbox uids (0x70000000…) and above the ranges
// /etc/subuid and systemd hand out.
const (
	idRangeBase  = 0x60000000
	idRangeSize  = 1 << 16
	idRangeSlots = 1024
)
