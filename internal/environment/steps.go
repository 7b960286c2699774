package environment

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// Step is one ordered build step after the spec's packages and files: the
// shape of an E2B template's steps (RUN, COPY, ENV, WORKDIR, USER), so
// serve can build what the official SDK's Template builder sends. Exactly
// one of the fields is set.
type Step struct {
	// Run is a shell command (sh -c) run in the rootfs as User.
	Run string `yaml:"run,omitempty" json:"run,omitempty"`
	// Copy unpacks files from a tar archive into the rootfs.
	Copy *CopyStep `yaml:"copy,omitempty" json:"copy,omitempty"`
	// Env sets variables for later steps and for every sandbox.
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// Workdir is the directory later run and copy steps start from.
	Workdir string `yaml:"workdir,omitempty" json:"workdir,omitempty"`
	// User is who later run steps run as (a name in the rootfs's
	// /etc/passwd, or a uid); on a run step, who that one runs as.
	User string `yaml:"user,omitempty" json:"user,omitempty"`
}

// CopyStep copies Src (a path inside Archive, as E2B's SDK uploads it) to
// Dest; Dest ending in "/" or naming a directory receives Src by name.
type CopyStep struct {
	// Archive is a tar file (optionally gzip-compressed) on disk, relative
	// to the spec file.
	Archive string `yaml:"archive" json:"archive"`
	Src     string `yaml:"src" json:"src"`
	Dest    string `yaml:"dest" json:"dest"`
	// Owner of what is copied (a user name or uid); "" = root.
	Owner string `yaml:"owner,omitempty" json:"owner,omitempty"`
	// Mode is octal permission bits for copied files; "" = as archived.
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
}

// Limits on steps: each run step is a process tree on the build machine,
// and a copy archive is read and unpacked whole.
const (
	maxSteps          = 256
	maxRunBytes       = 64 << 10
	maxArchiveBytes   = 512 << 20
	maxArchiveEntries = 100_000
)

var userRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$|^[0-9]{1,9}$`)

func (s *Spec) validateSteps() error {
	bad := func(i int, format string, a ...any) error {
		return fmt.Errorf("%w: steps[%d]: "+format, append([]any{ErrInvalidSpec, i}, a...)...)
	}
	if len(s.Steps) > maxSteps {
		return fmt.Errorf("%w: steps: at most %d", ErrInvalidSpec, maxSteps)
	}
	if len(s.Steps) > 0 && s.Base.Host {
		return fmt.Errorf("%w: a host base can't have steps: they would change the host itself", ErrInvalidSpec)
	}
	for i, st := range s.Steps {
		n := 0
		for _, set := range []bool{st.Run != "", st.Copy != nil, len(st.Env) > 0, st.Workdir != ""} {
			if set {
				n++
			}
		}
		if n > 1 || (n == 0 && st.User == "") {
			return bad(i, "set exactly one of run, copy, env, workdir or user")
		}
		if len(st.Run) > maxRunBytes || strings.ContainsRune(st.Run, 0) {
			return bad(i, "run: at most %d bytes, no NUL", maxRunBytes)
		}
		if st.User != "" && !userRE.MatchString(st.User) {
			return bad(i, "user %q: give a user name or a numeric uid", st.User)
		}
		if st.Workdir != "" && (!path.IsAbs(st.Workdir) || strings.ContainsRune(st.Workdir, 0)) {
			return bad(i, "workdir %q: give an absolute path", st.Workdir)
		}
		for k := range st.Env {
			if !envKeyRE.MatchString(k) {
				return bad(i, "env %q: not a valid variable name", k)
			}
		}
		if c := st.Copy; c != nil {
			if c.Archive == "" || c.Src == "" || c.Dest == "" {
				return bad(i, "copy: archive, src and dest are required")
			}
			if path.IsAbs(c.Src) || strings.HasPrefix(path.Clean(c.Src), "..") {
				return bad(i, "copy.src %q: give a path relative to the archive's root", c.Src)
			}
			if strings.ContainsRune(c.Dest, 0) {
				return bad(i, "copy.dest: no NUL")
			}
			if c.Owner != "" && !userRE.MatchString(c.Owner) {
				return bad(i, "copy.owner %q: give a user name or a numeric uid", c.Owner)
			}
			if c.Mode != "" {
				if m, err := strconv.ParseUint(c.Mode, 8, 32); err != nil || m > 0o7777 {
					return bad(i, "copy.mode %q: give octal permission bits such as 0644", c.Mode)
				}
			}
		}
	}
	return nil
}

// stepsDigest is what the build id covers of the steps: the steps in order,
// each copy archive by the SHA-256 of its bytes rather than its path.
func stepsDigest(s *Spec, in *inputs) []any {
	out := make([]any, 0, len(s.Steps))
	for i, st := range s.Steps {
		d := map[string]any{"run": st.Run, "env": sortedEnv(st.Env), "workdir": st.Workdir, "user": st.User}
		if c := st.Copy; c != nil {
			d["copy"] = map[string]string{"archive_sha256": in.Archives[i], "src": c.Src, "dest": c.Dest, "owner": c.Owner, "mode": c.Mode}
		}
		out = append(out, d)
	}
	return out
}

func sortedEnv(m map[string]string) [][2]string {
	out := make([][2]string, 0, len(m))
	for k, v := range m {
		out = append(out, [2]string{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// hashArchive is the SHA-256 of a copy step's archive, bounded.
func hashArchive(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, maxArchiveBytes+1))
	if err != nil {
		return "", err
	}
	if n > maxArchiveBytes {
		return "", fmt.Errorf("larger than %d bytes", maxArchiveBytes)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// stepState is what ENV, WORKDIR and USER steps carry to later steps.
type stepState struct {
	env     []string
	workdir string
	user    string
}

// runSteps applies spec.Steps in order.
func (b *builder) runSteps(ctx context.Context) error {
	st := &stepState{workdir: "/", user: "root"}
	for i, s := range b.spec.Steps {
		var err error
		switch {
		case s.Run != "":
			user := st.user
			if s.User != "" {
				user = s.User
			}
			fmt.Fprintf(b.logw, "-- step %d: RUN (as %s) %s\n", i+1, user, s.Run)
			b.p.linef("    step %d: RUN %s", i+1, oneLine(s.Run, 100))
			err = b.runAs(ctx, st, user, s.Run)
		case s.Copy != nil:
			fmt.Fprintf(b.logw, "-- step %d: COPY %s %s\n", i+1, s.Copy.Src, s.Copy.Dest)
			b.p.linef("    step %d: COPY %s %s", i+1, s.Copy.Src, s.Copy.Dest)
			err = b.copyStep(st, s.Copy)
		case s.Env != nil:
			for _, kv := range sortedEnv(s.Env) {
				st.env = append(st.env, kv[0]+"="+kv[1])
			}
		case s.Workdir != "":
			st.workdir = s.Workdir
			var d *os.File
			if d, err = rootfsDir(b.rootfs, strings.TrimPrefix(path.Clean(s.Workdir), "/")); err == nil {
				d.Close()
			}
		default:
			st.user = s.User
		}
		if err != nil {
			return &StepError{Index: i, Err: err}
		}
	}
	return nil
}

// StepError says which of spec.Steps failed (0-based).
type StepError struct {
	Index int
	Err   error
}

func (e *StepError) Error() string { return fmt.Sprintf("step %d: %v", e.Index+1, e.Err) }
func (e *StepError) Unwrap() error { return e.Err }

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// errNoUser is a user name the rootfs's /etc/passwd doesn't have.
var errNoUser = errors.New("no such user")

// lookupUser finds a user (name or uid) in the rootfs's /etc/passwd.
func (b *builder) lookupUser(user string) (uid, gid int, home string, err error) {
	if user == "" || user == "root" || user == "0" {
		return 0, 0, "/root", nil
	}
	p, err := securejoin.SecureJoin(b.rootfs, "etc/passwd")
	if err != nil {
		return 0, 0, "", err
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, 0, "", fmt.Errorf("user %q: the rootfs has no /etc/passwd", user)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 4<<20))
	for sc.Scan() {
		fl := strings.Split(sc.Text(), ":")
		if len(fl) < 6 || (fl[0] != user && fl[2] != user) {
			continue
		}
		u, err1 := strconv.Atoi(fl[2])
		g, err2 := strconv.Atoi(fl[3])
		if err1 != nil || err2 != nil {
			return 0, 0, "", fmt.Errorf("user %q: malformed /etc/passwd line", user)
		}
		return u, g, fl[5], nil
	}
	if n, err := strconv.Atoi(user); err == nil {
		return n, n, "/", nil
	}
	return 0, 0, "", fmt.Errorf("%w: user %q is not in the rootfs's /etc/passwd (create it in an earlier run step)", errNoUser, user)
}

// runAs runs a run step's command in the rootfs as user, in the build's
// jail (jail.go): its own user namespace where root is an unprivileged host
// uid, pivot_root into the rootfs, its own /proc and /dev, the internet
// through the egress stack only, and every process killed when it ends.
func (b *builder) runAs(ctx context.Context, st *stepState, user, command string) error {
	if _, err := os.Stat(filepath.Join(b.rootfs, "bin/sh")); err != nil {
		return errors.New("the rootfs has no /bin/sh to run the command with")
	}
	uid, gid, home, err := b.lookupUser(user)
	if errors.Is(err, errNoUser) {
		// E2B's wording, which its SDK's tests match, then ours.
		return fmt.Errorf("failed to run command '%s': command failed: unauthenticated: invalid username: '%s' (%w)", oneLine(command, 200), user, err)
	}
	if err != nil {
		return err
	}
	if uid < 0 || uid >= idRangeSize || gid < 0 || gid >= idRangeSize {
		return fmt.Errorf("user %q: uid and gid must be below %d (the ids a build maps)", user, idRangeSize)
	}
	if uid != 0 && !b.rootfsHas("usr/bin/setpriv", "bin/setpriv") {
		return fmt.Errorf("running as %q needs setpriv in the image (util-linux; Debian and Ubuntu have it): install it in an earlier step run as root", user)
	}
	for _, d := range []string{"proc", "dev", "etc"} {
		f, err := rootfsDir(b.rootfs, d)
		if err != nil {
			return err
		}
		f.Close()
	}
	workdir := st.workdir
	if f, err := rootfsDir(b.rootfs, strings.TrimPrefix(path.Clean("/"+workdir), "/")); err == nil {
		f.Close()
	} else {
		workdir = "/"
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "USER=" + user,
		"LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive",
		// The rootfs is the template's own: pip installing next to
		// Debian's packages is what the template author asked for.
		"PIP_BREAK_SYSTEM_PACKAGES=1", "PIP_ROOT_USER_ACTION=ignore", "PIP_DISABLE_PIP_VERSION_CHECK=1"}
	for _, kv := range sortedEnv(b.spec.Env) {
		env = append(env, kv[0]+"="+kv[1])
	}
	return b.inJail(ctx, uid, gid, workdir, append(env, st.env...), []string{"/bin/sh", "-c", command})
}

// rootfsHas reports whether one of the paths exists in the rootfs
// (resolved inside it).
func (b *builder) rootfsHas(paths ...string) bool {
	for _, p := range paths {
		if full, err := securejoin.SecureJoin(b.rootfs, p); err == nil {
			if _, err := os.Stat(full); err == nil {
				return true
			}
		}
	}
	return false
}

// copyStep unpacks the archive into a staging directory, then copies Src
// from it to Dest in the rootfs, resolving every path inside the rootfs.
func (b *builder) copyStep(st *stepState, c *CopyStep) error {
	stage, err := os.MkdirTemp(b.work, "copy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if err := untar(c.archivePath(b.spec), stage); err != nil {
		return fmt.Errorf("archive of %s: %w", c.Src, err)
	}
	uid, gid := 0, 0
	if c.Owner != "" {
		if uid, gid, _, err = b.lookupUser(c.Owner); err != nil {
			return err
		}
	}
	var mode os.FileMode
	if c.Mode != "" {
		m, _ := strconv.ParseUint(c.Mode, 8, 32)
		mode = os.FileMode(m)
	}
	src, err := securejoin.SecureJoin(stage, c.Src)
	if err != nil {
		return err
	}
	matches, _ := filepath.Glob(src)
	if len(matches) == 0 {
		return fmt.Errorf("%s is not in the uploaded files", c.Src)
	}
	dest := c.Dest
	if !path.IsAbs(dest) {
		dest = path.Join(st.workdir, dest)
	}
	for _, m := range matches {
		if !strings.HasPrefix(m, stage+string(filepath.Separator)) && m != stage {
			return fmt.Errorf("%s is outside the uploaded files", c.Src)
		}
		fi, err := os.Lstat(m)
		if err != nil {
			return err
		}
		target := dest
		if !fi.IsDir() {
			rootDest, err := securejoin.SecureJoin(b.rootfs, dest)
			if err != nil {
				return err
			}
			if di, err := os.Stat(rootDest); strings.HasSuffix(c.Dest, "/") || len(matches) > 1 || (err == nil && di.IsDir()) {
				target = path.Join(dest, filepath.Base(m))
			}
		}
		if err := filepath.Walk(m, func(p string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(m, p)
			// Every write resolves inside the rootfs, at the moment of the
			// write (rootfsio.go): an image symlink never redirects it.
			to := strings.TrimPrefix(path.Clean("/"+path.Join(target, filepath.ToSlash(rel))), "/")
			if to == "" {
				return nil // the rootfs itself
			}
			perm := info.Mode().Perm()
			if mode != 0 && !info.IsDir() {
				perm = mode
			}
			switch {
			case info.IsDir():
				return mkdirInRootfs(b.rootfs, to, perm, uid, gid)
			case info.Mode()&os.ModeSymlink != 0:
				link, err := os.Readlink(p)
				if err != nil {
					return err
				}
				return replaceSymlinkInRootfs(b.rootfs, to, link, uid, gid) // read later only through the rootfs
			case info.Mode().IsRegular():
				return copyIntoRootfs(p, b.rootfs, to, uid, gid, perm)
			default:
				return nil // devices, fifos: not copied
			}
		}); err != nil {
			return err
		}
	}
	return nil
}

// copyIntoRootfs copies the host file from (our own staging copy) to rel
// of the rootfs, owned by uid:gid with perm.
func copyIntoRootfs(from, root, rel string, uid, gid int, perm os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := createInRootfs(root, rel)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	// chown first: it clears set-id bits a mode may ask for.
	if err == nil {
		err = out.Chown(uid, gid)
	}
	if err == nil {
		err = out.Chmod(perm)
	}
	return errors.Join(err, out.Close())
}

func (c *CopyStep) archivePath(s *Spec) string { return s.abs(c.Archive) }

// untar unpacks a (gzip'd) tar into dir: regular files, directories and
// symlinks only, every name kept inside dir, bounded in entries and bytes.
func untar(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		r = gz
	}
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if n >= maxArchiveEntries {
			return fmt.Errorf("more than %d entries", maxArchiveEntries)
		}
		name := path.Clean("/" + h.Name)
		to, err := securejoin.SecureJoin(dir, name)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(to, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			total += h.Size
			if h.Size < 0 || total > 4*maxArchiveBytes {
				return fmt.Errorf("unpacks to more than %d bytes", 4*maxArchiveBytes)
			}
			out, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, io.LimitReader(tr, h.Size))
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			_ = os.Chmod(to, os.FileMode(h.Mode)&0o7777)
		case tar.TypeSymlink:
			_ = os.RemoveAll(to)
			if err := os.Symlink(h.Linkname, to); err != nil {
				return err
			}
		default:
			// hard links, devices, fifos: not something a template's
			// files need, and not something to create from an upload.
		}
	}
}

// allEnv is Env with every env step applied over it, in order.
func (s *Spec) allEnv() map[string]string {
	if len(s.Steps) == 0 {
		return s.Env
	}
	out := map[string]string{}
	for k, v := range s.Env {
		out[k] = v
	}
	for _, st := range s.Steps {
		for k, v := range st.Env {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (s *Spec) lastWorkdirUser() (workdir, user string) {
	for _, st := range s.Steps {
		if st.Workdir != "" {
			workdir = st.Workdir
		}
		if st.User != "" && st.Run == "" {
			user = st.User
		}
	}
	return workdir, user
}

// Validate checks a spec built in code (ReadSpec and ParseSpec validate
// what they parse).
func Validate(s *Spec) error { return s.validate() }

// Contents reads what a spec names besides itself, bounded and checked as
// a build reads it: the pip lock (nil without one) and each file's bytes by
// path. For builders other than the store's (the e2b variant's templates).
func (s *Spec) Contents() (lock []byte, files map[string][]byte, err error) {
	if err := s.validate(); err != nil {
		return nil, nil, err
	}
	files = map[string][]byte{}
	if s.Pip != nil {
		if lock, err = readBounded(s.abs(s.Pip.Lock), maxLockBytes); err != nil {
			return nil, nil, fmt.Errorf("%w: pip.lock: %w", ErrInvalidSpec, err)
		}
		if err := checkLock(lock); err != nil {
			return nil, nil, err
		}
	}
	for i, f := range s.Files {
		if f.Source == "" {
			files[f.Path] = []byte(f.Content)
			continue
		}
		b, err := readBounded(s.abs(f.Source), maxFileBytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: files[%d].source: %w", ErrInvalidSpec, i, err)
		}
		files[f.Path] = b
	}
	return lock, files, nil
}
