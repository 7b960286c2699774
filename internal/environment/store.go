package environment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Store is a directory of builds:
//
//	builds/<id>/build.json   the Build record (written last: its presence means done)
//	builds/<id>/rootfs/      the root filesystem
//	names/<name>             the id the name points at
//	tmp/                     builds in progress
type Store struct {
	Dir string
	// LoopbackPorts are TCP ports of the host's loopback that build steps
	// may reach at the same 127.0.0.1:port inside their jail: a package
	// index on the build machine (tests serve theirs on loopback). Steps
	// reach nothing else of the host; none by default.
	LoopbackPorts []int
	// TenantPulls marks image pulls as a tenant's (serve's template
	// builds): every connection of a pull, redirects and token realms
	// included, is checked at dial time by the policy build steps run
	// under (the internet; never the host's own addresses, link-local or
	// the private ranges; of the host's loopback only LoopbackPorts), no
	// proxy from the environment is used, and a failed pull says why in
	// our words only (*PullError), never with what the registry answered.
	// Off, pulls go where the image names, as the operator's own tools do.
	TenantPulls bool
}

// DefaultDir is where environments live unless told otherwise:
// $CODE_SANDBOXES_ENV_DIR, else /var/lib/code-sandboxes/environments for
// root, else $XDG_DATA_HOME (or ~/.local/share)/code-sandboxes/environments.
func DefaultDir() string {
	if d := os.Getenv("CODE_SANDBOXES_ENV_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/code-sandboxes/environments"
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "code-sandboxes", "environments")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), fmt.Sprintf("code-sandboxes-environments-%d", os.Getuid()))
	}
	return filepath.Join(home, ".local", "share", "code-sandboxes", "environments")
}

// Open returns the store at dir ("" = DefaultDir()), creating it.
func Open(dir string) (*Store, error) {
	if dir == "" {
		dir = DefaultDir()
	}
	for _, d := range []string{"builds", "names", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("environment store %s: %w", dir, err)
		}
	}
	return &Store{Dir: dir}, nil
}

var (
	nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	idRE   = regexp.MustCompile(`^[0-9a-f]{12,64}$`)
)

// ValidName reports whether s is usable as an environment name.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Resolve finds a build by name, by full id or by an unambiguous id prefix of
// at least 12 hex digits ("sha256:" accepted).
//
// A built-in name ("python") resolves to the build of this program's own
// spec of it, not to whatever build the name last pointed at: another
// version of code-sandboxes on the machine may have built its own spec
// under the same name, and a sandbox must run what its program expects.
func (s *Store) Resolve(ref string) (*Build, error) {
	ref = strings.TrimPrefix(ref, "sha256:")
	if spec, ok := Builtin(ref); ok {
		in, err := s.resolveInputs(context.Background(), spec)
		if err != nil {
			return nil, err
		}
		if b, err := s.load(digest(spec, in)); err == nil {
			return b, nil
		}
		return nil, fmt.Errorf("%w: the built-in environment %q is not built on this machine for this version (build it with `code-sandboxes environments build %s`)", ErrNotFound, ref, ref)
	}
	if ValidName(ref) {
		if b, err := os.ReadFile(filepath.Join(s.Dir, "names", ref)); err == nil {
			return s.load(strings.TrimSpace(string(b)))
		}
	}
	if idRE.MatchString(ref) {
		if len(ref) == 64 {
			return s.load(ref)
		}
		ents, _ := os.ReadDir(filepath.Join(s.Dir, "builds"))
		var hits []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ref) {
				hits = append(hits, e.Name())
			}
		}
		switch len(hits) {
		case 1:
			return s.load(hits[0])
		case 0:
		default:
			return nil, fmt.Errorf("%w: id prefix %s matches %d builds; give more digits", ErrNotFound, ref, len(hits))
		}
	}
	return nil, fmt.Errorf("%w: %q (build it with `code-sandboxes environments build -f spec.yaml`; list with `code-sandboxes environments`)", ErrNotFound, ref)
}

func (s *Store) load(id string) (*Build, error) {
	dir := filepath.Join(s.Dir, "builds", id)
	raw, err := os.ReadFile(filepath.Join(dir, "build.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: build %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	var b Build
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("build %s: corrupt record: %w", id, err)
	}
	b.Dir = dir
	return &b, nil
}

// List returns every finished build, newest first. Names reports which
// name points at which id.
func (s *Store) List() ([]*Build, error) {
	ents, err := os.ReadDir(filepath.Join(s.Dir, "builds"))
	if err != nil {
		return nil, err
	}
	var out []*Build
	for _, e := range ents {
		if b, err := s.load(e.Name()); err == nil {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, nil
}

// Names maps each name to the build id it points at.
func (s *Store) Names() map[string]string {
	out := map[string]string{}
	ents, _ := os.ReadDir(filepath.Join(s.Dir, "names"))
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(s.Dir, "names", e.Name())); err == nil {
			out[e.Name()] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// Remove deletes a build (by name or id) and every name pointing at it.
func (s *Store) Remove(ref string) (*Build, error) {
	b, err := s.Resolve(ref)
	if err != nil {
		return nil, err
	}
	for n, id := range s.Names() {
		if id == b.ID {
			if err := os.Remove(filepath.Join(s.Dir, "names", n)); err != nil {
				return nil, err
			}
		}
	}
	// Rename first so a concurrent Resolve never sees half a build.
	trash := filepath.Join(s.Dir, "tmp", "rm-"+b.ID)
	if err := os.Rename(b.Dir, trash); err != nil {
		return nil, err
	}
	return b, os.RemoveAll(trash)
}

// setName points name at id, atomically.
func (s *Store) setName(name, id string) error {
	tmp := filepath.Join(s.Dir, "names", "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.Dir, "names", name))
}
