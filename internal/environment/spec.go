package environment

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// builderVersion is mixed into every build id: bump it when the build steps
// change what ends up in a rootfs, so old builds are not mistaken for new.
const builderVersion = 2

// Limits on spec inputs: a spec is small, and a build reads every input to
// hash it.
const (
	maxSpecBytes  = 1 << 20
	maxFiles      = 64
	maxFileBytes  = 16 << 20
	maxLockBytes  = 4 << 20
	maxAptPackage = 512
)

// ReadSpec reads and validates a spec file.
func ReadSpec(file string) (*Spec, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxSpecBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrInvalidSpec, file, err)
	}
	if len(raw) > maxSpecBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalidSpec, file, maxSpecBytes)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	s, err := ParseSpec(raw, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}

// ParseSpec parses a YAML spec; dir is where relative paths resolve.
func ParseSpec(raw []byte, dir string) (*Spec, error) {
	var s Spec
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true) // a typo in a key is an error, not a silent default
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	s.dir = dir
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

var (
	aptNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$`)
	envKeyRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	suiteRE   = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

func (s *Spec) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, a...)...)
	}
	if !ValidName(s.Name) {
		return bad("name %q: use a DNS label (lowercase letters, digits and '-', at most 63)", s.Name)
	}
	n := 0
	for _, set := range []bool{s.Base.Debian != "", s.Base.Image != "", s.Base.Tarball != "", s.Base.Environment != "", s.Base.Host} {
		if set {
			n++
		}
	}
	if n != 1 {
		return bad("base: set exactly one of debian (a suite such as bookworm), image (an OCI reference), tarball (a file), environment (another build) or host: true")
	}
	if s.Base.Debian != "" && !suiteRE.MatchString(s.Base.Debian) {
		return bad("base.debian %q: give a suite name such as bookworm", s.Base.Debian)
	}
	if s.Base.Mirror != "" && s.Base.Debian == "" {
		return bad("base.mirror applies only to a debian base")
	}
	if s.Base.Mirror != "" && !strings.HasPrefix(s.Base.Mirror, "http://") && !strings.HasPrefix(s.Base.Mirror, "https://") && !strings.HasPrefix(s.Base.Mirror, "file:/") {
		return bad("base.mirror %q: give an http(s):// or file:/ URL", s.Base.Mirror)
	}
	if s.Base.Insecure && s.Base.Image == "" {
		return bad("base.insecure applies only to an image base")
	}
	if s.Base.Host && (len(s.Apt) > 0 || s.Pip != nil || len(s.Files) > 0) {
		return bad("a host base can add only env: apt, pip and files would change the host itself; use a debian, image or tarball base")
	}
	if len(s.Apt) > maxAptPackage {
		return bad("apt: at most %d packages", maxAptPackage)
	}
	for _, p := range s.Apt {
		if !aptNameRE.MatchString(p) {
			return bad("apt package %q: give a Debian package name, optionally name=version", p)
		}
	}
	if s.Pip != nil {
		if s.Pip.Lock == "" {
			return bad("pip.lock: give the path of a requirements lock (every line name==version --hash=sha256:…)")
		}
		if s.Pip.Index != "" && !strings.HasPrefix(s.Pip.Index, "http://") && !strings.HasPrefix(s.Pip.Index, "https://") {
			return bad("pip.index %q: give an http(s):// URL", s.Pip.Index)
		}
	}
	if len(s.Files) > maxFiles {
		return bad("files: at most %d", maxFiles)
	}
	for i, f := range s.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return bad("files[%d].path %q: give a clean absolute path", i, f.Path)
		}
		for _, reserved := range []string{"/proc", "/dev", "/sys", "/tmp", "/home/user", "/files", "/run"} {
			if f.Path == reserved || strings.HasPrefix(f.Path, reserved+"/") {
				return bad("files[%d].path %q: %s is mounted fresh in every sandbox, so a file there would never be seen", i, f.Path, reserved)
			}
		}
		if f.Content != "" && f.Source != "" {
			return bad("files[%d]: set content or source, not both", i)
		}
		if f.Mode != "" {
			if m, err := strconv.ParseUint(f.Mode, 8, 32); err != nil || m > 0o777 {
				return bad("files[%d].mode %q: give octal permission bits such as 0644", i, f.Mode)
			}
		}
	}
	for k := range s.Env {
		if !envKeyRE.MatchString(k) {
			return bad("env %q: not a valid variable name", k)
		}
	}
	return s.validateSteps()
}

// abs resolves a spec-relative path.
func (s *Spec) abs(p string) string {
	if filepath.IsAbs(p) || s.dir == "" {
		return p
	}
	return filepath.Join(s.dir, p)
}

// inputs are the resolved contents the id covers besides the spec text.
type inputs struct {
	Mirror      string            // the apt mirror actually used
	BaseBuild   *Build            // the build an environment base names
	ImageDigest string            // the image's manifest digest
	Tarball     string            // sha256 of the tarball
	Lock        []byte            // the pip lock
	Files       map[string][]byte // path → content
	Archives    map[int]string    // step index → sha256 of its copy archive
}

// digest is the build id: SHA-256 of a canonical JSON document holding the
// builder version, the spec (without description, which changes nothing
// inside) and the hashes of every input.
func digest(s *Spec, in *inputs) string {
	type fileRef struct {
		Path, Mode, SHA256 string
	}
	files := make([]fileRef, 0, len(s.Files))
	for _, f := range s.Files {
		files = append(files, fileRef{f.Path, f.Mode, sha(in.Files[f.Path])})
	}
	apt := append([]string(nil), s.Apt...)
	sort.Strings(apt)
	env := make([][2]string, 0, len(s.Env))
	for k, v := range s.Env {
		env = append(env, [2]string{k, v})
	}
	sort.Slice(env, func(i, j int) bool { return env[i][0] < env[j][0] })
	doc := map[string]any{
		"builder": builderVersion,
		"name":    s.Name,
		"base": map[string]any{
			"debian": s.Base.Debian, "mirror": in.Mirror, "image": s.Base.Image,
			"image_digest": in.ImageDigest, "tarball_sha256": in.Tarball, "host": s.Base.Host,
		},
		"base_build": baseID(in),
		"apt":        apt,
		"files":      files,
		"env":        env,
	}
	if len(s.Steps) > 0 { // absent otherwise: ids of step-less specs stay as they were
		doc["steps"] = stepsDigest(s, in)
	}
	if s.Pip != nil {
		doc["pip"] = map[string]any{"lock_sha256": sha(in.Lock), "index": s.Pip.Index}
	}
	// encoding/json sorts map keys, so the document is canonical.
	b, _ := json.Marshal(doc)
	return sha(b)
}

func baseID(in *inputs) string {
	if in.BaseBuild == nil {
		return ""
	}
	return in.BaseBuild.ID
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// checkLock refuses a pip lock that pip's --require-hashes would refuse
// anyway, earlier and with the line number.
func checkLock(lock []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(lock))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var logical strings.Builder
	lineNo, start := 0, 0
	flush := func() error {
		l := strings.TrimSpace(logical.String())
		logical.Reset()
		if i := strings.Index(l, " #"); i >= 0 {
			l = strings.TrimSpace(l[:i])
		}
		if l == "" || strings.HasPrefix(l, "#") {
			return nil
		}
		if strings.HasPrefix(l, "-") {
			return fmt.Errorf("%w: pip lock line %d: options (%q) are not allowed in the lock; the index comes from pip.index", ErrInvalidSpec, start, strings.Fields(l)[0])
		}
		if !strings.Contains(l, "==") {
			return fmt.Errorf("%w: pip lock line %d: pin an exact version with == (got %q)", ErrInvalidSpec, start, l)
		}
		if !strings.Contains(l, "--hash=sha256:") {
			return fmt.Errorf("%w: pip lock line %d: add --hash=sha256:<digest> for %q", ErrInvalidSpec, start, strings.Fields(l)[0])
		}
		return nil
	}
	for sc.Scan() {
		lineNo++
		t := sc.Text()
		if logical.Len() == 0 {
			start = lineNo
		}
		if strings.HasSuffix(t, "\\") {
			logical.WriteString(strings.TrimSuffix(t, "\\") + " ")
			continue
		}
		logical.WriteString(t)
		if err := flush(); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: pip lock: %w", ErrInvalidSpec, err)
	}
	return flush()
}
