package environment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/tail"
	"github.com/code-sandboxes/code-sandboxes/internal/units"
)

// BuildOptions tune a build.
type BuildOptions struct {
	// Progress receives progress: a bar when it is a terminal, plain lines
	// otherwise; nil = silent.
	Progress io.Writer
	// Force rebuilds even when a build with the same id exists.
	Force bool
	// Log, when set, receives the full build log (step headers and every
	// command's output) as it is written, besides the log file.
	Log io.Writer
}

// Build builds spec (or finds the cached build with the same id) and points
// spec.Name at it.
func (s *Store) Build(ctx context.Context, spec *Spec, opt BuildOptions) (*Build, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if err := checkBuildSupport(); err != nil {
		return nil, err
	}
	p := newProgress(opt.Progress)
	in, err := s.resolveInputs(ctx, spec)
	if err != nil {
		return nil, err
	}
	id := digest(spec, in)
	if !opt.Force {
		if b, err := s.load(id); err == nil {
			p.linef("environment %s: cached build %s", spec.Name, b.ShortID())
			return b, s.setName(spec.Name, id)
		}
	}
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Work dirs of this id that a build which died (a crash, a restart of
	// serve) left: we hold the id's lock, so no live build owns them.
	if stale, _ := filepath.Glob(filepath.Join(s.Dir, "tmp", id[:12]+"-*")); len(stale) > 0 {
		for _, d := range stale {
			if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
				removeTree(d)
			}
		}
	}
	if !opt.Force { // someone else may have built it while we waited
		if b, err := s.load(id); err == nil {
			p.linef("environment %s: cached build %s", spec.Name, b.ShortID())
			return b, s.setName(spec.Name, id)
		}
	}
	start := time.Now()
	work, err := os.MkdirTemp(filepath.Join(s.Dir, "tmp"), id[:12]+"-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			removeTree(work)
		}
	}()
	bl := &builder{spec: spec, in: in, id: id, work: work, rootfs: filepath.Join(work, "rootfs"), p: p,
		storeDir: s.Dir, loopback: s.LoopbackPorts, tenantPulls: s.TenantPulls}
	defer func() { bl.jail.close() }()
	if bl.log, err = os.Create(filepath.Join(work, "build.log")); err != nil {
		return nil, err
	}
	bl.logw = bl.log
	if opt.Log != nil {
		bl.logw = io.MultiWriter(bl.log, opt.Log)
	}
	defer bl.log.Close()
	p.linef("environment %s: building %s (%s)", spec.Name, id[:12], bl.baseDesc())
	err = bl.run(ctx)
	bl.jail.close() // before the work dir moves: its mount is in there
	if err != nil {
		// Keep the log where the user can read it after the work dir goes.
		failed := filepath.Join(s.Dir, "tmp", id[:12]+".failed.log")
		_ = copyFile(bl.log.Name(), failed)
		return nil, fmt.Errorf("%w (full log: %s)", err, failed)
	}
	if spec.Base.Environment != "" {
		// Only what the steps changed takes new space (see share.go).
		saved, err := shareWithBase(in.BaseBuild.Rootfs(), bl.rootfs)
		if err != nil {
			return nil, fmt.Errorf("%w: share files with the base: %w", ErrBuildFailed, err)
		}
		p.linef("environment %s: %s shared with %s", spec.Name, units.Bytes(saved), in.BaseBuild.Name)
	}
	b := &Build{ID: id, Name: spec.Name, Description: spec.Description, Base: bl.baseDesc(),
		CreatedAt: time.Now().UTC(), Env: spec.allEnv(), Host: spec.Base.Host}
	b.Workdir, b.User = spec.lastWorkdirUser()
	if !b.Host {
		b.SizeBytes = treeSize(bl.rootfs)
	}
	raw, _ := json.MarshalIndent(b, "", "  ")
	if err := os.WriteFile(filepath.Join(work, "build.json"), raw, 0o644); err != nil {
		return nil, err
	}
	final := filepath.Join(s.Dir, "builds", id)
	if _, err := os.Stat(final); err == nil { // Force: replace the old one
		trash := filepath.Join(s.Dir, "tmp", "old-"+id[:12]+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		if err := os.Rename(final, trash); err != nil {
			return nil, err
		}
		defer removeTree(trash)
	}
	if err := os.Rename(work, final); err != nil {
		return nil, err
	}
	ok = true
	b.Dir = final
	p.linef("environment %s: built %s in %s (%s)", spec.Name, id[:12], time.Since(start).Round(100*time.Millisecond), units.Bytes(b.SizeBytes))
	return b, s.setName(spec.Name, id)
}

// Ensure resolves ref; when it names a built-in environment ("python") that
// was never built, it builds it first, saying so on opt.Progress.
func (s *Store) Ensure(ctx context.Context, ref string, opt BuildOptions) (*Build, error) {
	b, err := s.Resolve(ref)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return b, err
	}
	spec, ok := Builtin(ref)
	if !ok {
		return nil, err
	}
	if opt.Progress != nil {
		fmt.Fprintf(opt.Progress, "environment %q is not built yet: building it now (first use only; later sandboxes reuse it)\n", ref)
	}
	return s.Build(ctx, spec, opt)
}

// lock serialises builds of one id across processes (flock on a file that
// the kernel releases if we die).
func (s *Store) lock(ctx context.Context, id string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.Dir, "tmp", id[:12]+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another build of %s: %w", id[:12], ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

type builder struct {
	spec         *Spec
	in           *inputs
	id           string
	work, rootfs string
	log          *os.File
	logw         io.Writer // log, and BuildOptions.Log
	p            *progress
	storeDir     string
	loopback     []int // Store.LoopbackPorts
	tenantPulls  bool  // Store.TenantPulls
	jail         *jail // made by the first command run in the rootfs
}

func (b *builder) baseDesc() string {
	switch {
	case b.spec.Base.Debian != "":
		return "debian " + b.spec.Base.Debian + " from " + b.in.Mirror
	case b.spec.Base.Image != "":
		return "image " + b.spec.Base.Image + "@" + b.in.ImageDigest
	case b.spec.Base.Environment != "":
		return "environment " + b.in.BaseBuild.Name + "@" + b.in.BaseBuild.ShortID()
	case b.spec.Base.Tarball != "":
		return "tarball " + filepath.Base(b.spec.Base.Tarball) + " sha256:" + b.in.Tarball[:12]
	}
	return "host"
}

func (b *builder) run(ctx context.Context) error {
	sp := b.spec
	if sp.Base.Host {
		return nil // nothing to put on disk: the host is the root
	}
	steps := []struct {
		name string
		skip bool
		fn   func(context.Context) error
	}{
		{"bootstrap " + b.baseDesc(), sp.Base.Debian == "", b.debootstrap},
		{"pull and unpack " + b.baseDesc(), sp.Base.Image == "" && sp.Base.Tarball == "", b.unpackImage},
		{"copy " + b.baseDesc(), sp.Base.Environment == "", b.copyBase},
		{"install apt packages: " + strings.Join(sp.Apt, " "), sp.Base.Debian != "" || len(sp.Apt) == 0, b.aptInstall},
		{"sandbox contract: user 1000, mount points", false, b.contract},
		{"install the pip lock with --require-hashes", sp.Pip == nil, b.pipInstall},
		{"write files and the manifest", false, b.files},
		{fmt.Sprintf("template steps (%d)", len(sp.Steps)), len(sp.Steps) == 0, b.runSteps},
		{"check python3", false, b.checkPython},
	}
	n := 0
	for _, s := range steps {
		if !s.skip {
			n++
		}
	}
	i := 0
	for _, s := range steps {
		if s.skip {
			continue
		}
		i++
		b.p.step(i, n, s.name)
		fmt.Fprintf(b.logw, "== [%d/%d] %s\n", i, n, s.name)
		if err := s.fn(ctx); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: %s: %w", ErrBuildFailed, s.name, ctx.Err())
			}
			return fmt.Errorf("%w: %s: %w", ErrBuildFailed, s.name, err)
		}
	}
	b.p.done()
	return nil
}

// debootstrap makes a Debian rootfs with mmdebstrap, apt packages included
// (one apt run, no recommends), inside a private mount namespace so that
// the proc/dev mounts it makes can never outlive it or leak to the host.
func (b *builder) debootstrap(ctx context.Context) error {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return errors.New("mmdebstrap is not installed: apt-get install mmdebstrap (or use an image or tarball base)")
	}
	args := []string{"mmdebstrap", "--variant=minbase", "--aptopt=APT::Install-Recommends \"false\"",
		"--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-include=/usr/share/doc/*/copyright"}
	if len(b.spec.Apt) > 0 {
		args = append(args, "--include="+strings.Join(b.spec.Apt, ","))
	}
	args = append(args, b.spec.Base.Debian, b.rootfs, b.in.Mirror)
	return b.command(ctx, privateNS(args...), nil)
}

// copyBase starts from another build's rootfs. cp -a keeps owners, modes,
// links and devices, and reflinks where the filesystem can.
func (b *builder) copyBase(ctx context.Context) error {
	return b.command(ctx, []string{"cp", "-a", "--reflink=auto", b.in.BaseBuild.Rootfs(), b.rootfs}, nil)
}

// privateNS runs argv in new mount and pid namespaces: every mount it makes
// dies with it, and so does every process it leaves behind.
func privateNS(argv ...string) []string {
	return append([]string{"unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child"}, argv...)
}

// inRoot runs argv in the rootfs as its root, in the build's jail (see
// jail.go: never host root, no host /dev, the internet only through the
// egress stack).
func (b *builder) inRoot(ctx context.Context, env []string, argv ...string) error {
	return b.inJail(ctx, 0, 0, "/", append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"}, env...), argv)
}

// inJail runs argv in the build's jail (made on first use) as uid:gid in
// workdir, with the jail's resolver in the rootfs for the time of it.
func (b *builder) inJail(ctx context.Context, uid, gid int, workdir string, env, argv []string) error {
	if b.jail == nil {
		j, err := newJail(b.storeDir, b.work, b.rootfs, b.loopback, b.logw)
		if err != nil {
			return err
		}
		b.jail = j
	}
	restore, err := b.withResolver()
	if err != nil {
		return err
	}
	defer restore()
	return b.jail.run(ctx, b, uid, gid, workdir, env, argv)
}

// jailResolver is the resolv.conf of a step: the egress stack's resolver
// on the gateway of tun0 (it forwards to the host's resolvers).
var jailResolver = []byte("nameserver " + isolate.TUNGatewayIPv4 + "\nnameserver " + isolate.TUNGatewayIPv6 + "\n")

// withResolver puts the jail's resolv.conf into the rootfs for the step and
// takes it out again: a built image carries no build network settings.
func (b *builder) withResolver() (func(), error) {
	host := jailResolver
	// Every access resolves inside the rootfs: its etc may be a symlink
	// to a host directory (etc -> /root).
	const rel = "etc/resolv.conf"
	etc, err := rootfsDir(b.rootfs, "etc")
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	lerr := unix.Fstatat(int(etc.Fd()), "resolv.conf", &st, unix.AT_SYMLINK_NOFOLLOW)
	var oldLink string
	var oldData []byte
	switch {
	case lerr != nil:
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		buf := make([]byte, 4096)
		if n, err := unix.Readlinkat(int(etc.Fd()), "resolv.conf", buf); err == nil && n < len(buf) {
			oldLink = string(buf[:n])
		}
	case st.Mode&unix.S_IFMT == unix.S_IFREG:
		if fd, err := unix.Openat(int(etc.Fd()), "resolv.conf", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			f := os.NewFile(uintptr(fd), rel)
			oldData, _ = io.ReadAll(io.LimitReader(f, 1<<20))
			f.Close()
		}
	default:
		etc.Close()
		return nil, fmt.Errorf("the rootfs's /etc/resolv.conf is not a file")
	}
	etc.Close()
	oldMode := os.FileMode(st.Mode & 0o7777)
	if err := writeInRootfs(b.rootfs, rel, host, 0o644); err != nil {
		return nil, err
	}
	return func() {
		_ = removeInRootfs(b.rootfs, rel)
		switch {
		case oldLink != "":
			_ = symlinkInRootfs(b.rootfs, rel, oldLink)
		case oldData != nil:
			_ = writeInRootfs(b.rootfs, rel, oldData, oldMode)
		}
	}, nil
}

// command runs argv with its output in the build log; a failure carries the
// log's tail.
func (b *builder) command(ctx context.Context, argv, env []string) error {
	return b.commandFiles(ctx, argv, env, nil)
}

// commandFiles is command with extra files for the child (fd 3 on).
func (b *builder) commandFiles(ctx context.Context, argv, env []string, extra []*os.File) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.ExtraFiles = extra
	cmd.Env = env
	if env == nil {
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"}
	}
	last := &tailBuffer{max: 8 << 10}
	cmd.Stdout = io.MultiWriter(b.logw, last, b.p.activity())
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", argv[0], err, tail.Lines(last.String(), 15))
	}
	return nil
}

func (b *builder) aptInstall(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(b.rootfs, "usr/bin/apt-get")); err != nil {
		return errors.New("the base has no apt-get, so apt packages can't be installed; use a Debian or Ubuntu base")
	}
	script := `set -e
apt-get update -q
apt-get install -y -q --no-install-recommends "$@"
apt-get clean
rm -rf /var/lib/apt/lists/*`
	return b.inRoot(ctx, nil, append([]string{"sh", "-c", script, "sh"}, b.spec.Apt...)...)
}

// contract makes the rootfs fit the sandbox contract (DESIGN §4): user 1000
// in group 100, and the mount points every variant mounts over.
func (b *builder) contract(ctx context.Context) error {
	for _, d := range []struct {
		path string
		mode os.FileMode
		uid  int
	}{
		{"proc", 0o555, 0}, {"dev", 0o755, 0}, {"sys", 0o555, 0}, {"run", 0o755, 0},
		{"tmp", 0o1777, 0}, {"var/tmp", 0o1777, 0}, {"home", 0o755, 0}, {"home/user", 0o755, 1000},
		{"files", 0o755, 1000}, {"etc", 0o755, 0},
	} {
		if existsInRootfs(b.rootfs, d.path) && !dirInRootfs(b.rootfs, d.path) {
			continue // e.g. /var/tmp as a link: leave the image's choice
		}
		gid := 0
		if d.uid != 0 {
			gid = 100
		}
		if err := mkdirInRootfs(b.rootfs, d.path, d.mode, d.uid, gid); err != nil {
			return err
		}
	}
	// Launchers overlay these files, which needs them to exist; and
	// "localhost" must resolve with network none.
	for name, content := range map[string]string{
		"etc/hosts":    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/hostname": "sandbox\n",
	} {
		if existsInRootfs(b.rootfs, name) {
			continue
		}
		if err := writeInRootfs(b.rootfs, name, []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := ensureLine(b.rootfs, "etc/group", "users:", "users:x:100:user\n", ":100:"); err != nil {
		return err
	}
	return ensureLine(b.rootfs, "etc/passwd", "user:", "user:x:1000:100:user:/home/user:/bin/bash\n", ":1000:")
}

// ensureLine appends line to file unless an entry with the id (":1000:")
// is already there; an image's own uid-1000 account is kept as it is.
func ensureLine(root, rel, prefix, line, id string) error {
	old, err := readInRootfs(root, rel, 16<<20)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, l := range strings.Split(string(old), "\n") {
		f := strings.Split(l, ":")
		if len(f) >= 3 && ":"+f[2]+":" == id {
			return nil
		}
		if strings.HasPrefix(l, prefix) {
			return nil
		}
	}
	if len(old) > 0 && !bytes.HasSuffix(old, []byte("\n")) {
		old = append(old, '\n')
	}
	return writeInRootfs(root, rel, append(old, line...), 0o644)
}

func (b *builder) pipInstall(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(b.rootfs, "usr/bin/python3")); err != nil {
		return errors.New("the pip lock needs python3 in the rootfs: add python3 and python3-pip to apt")
	}
	const lockRel = "tmp/.code-sandboxes-lock.txt"
	if err := writeInRootfs(b.rootfs, lockRel, b.in.Lock, 0o644); err != nil {
		return err
	}
	defer removeInRootfs(b.rootfs, lockRel)
	if err := b.inRoot(ctx, nil, "python3", "-m", "pip", "--version"); err != nil {
		return errors.New("the pip lock needs pip in the rootfs: add python3-pip to apt")
	}
	args := []string{"python3", "-m", "pip", "install", "--no-cache-dir", "--require-hashes", "--no-input",
		"--disable-pip-version-check", "--root-user-action=ignore", "-r", "/tmp/.code-sandboxes-lock.txt"}
	if b.spec.Pip.Index != "" {
		args = append(args, "--index-url", b.spec.Pip.Index)
	}
	// Debian marks its python "externally managed" (PEP 668); the whole
	// rootfs is ours, so installing next to Debian's packages is intended.
	err := b.inRoot(ctx, []string{"PIP_BREAK_SYSTEM_PACKAGES=1"}, args...)
	if err != nil && strings.Contains(err.Error(), "DO NOT MATCH THE HASHES") {
		return fmt.Errorf("a downloaded package does not match its --hash in the lock: the index served different bytes than were locked (re-lock, or check the index): %w", err)
	}
	return err
}

func (b *builder) files(ctx context.Context) error {
	for _, f := range b.spec.Files {
		mode := os.FileMode(0o644)
		if f.Mode != "" {
			m, _ := strconv.ParseUint(f.Mode, 8, 32)
			mode = os.FileMode(m)
		}
		if err := writeInRootfs(b.rootfs, strings.TrimPrefix(filepath.Clean("/"+f.Path), "/"), b.in.Files[f.Path], mode); err != nil {
			return err
		}
	}
	manifest, _ := json.MarshalIndent(map[string]any{"name": b.spec.Name, "build_id": b.id, "base": b.baseDesc(),
		"apt": b.spec.Apt, "env": b.spec.Env}, "", "  ")
	return writeInRootfs(b.rootfs, "etc/code-sandboxes/environment.json", append(manifest, '\n'), 0o644)
}

func (b *builder) checkPython(ctx context.Context) error {
	p, err := securejoin.SecureJoin(b.rootfs, "usr/bin/python3")
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); err != nil {
		return errors.New("the rootfs has no /usr/bin/python3, which sandbox kernels need: add python3 to apt (or use an image that has it)")
	}
	return nil
}

// removeTree deletes a build directory, first detaching anything still
// mounted below it: RemoveAll through a leaked bind of /dev would delete
// the host's device nodes.
func removeTree(dir string) {
	for _, mp := range mountsBelow(dir) {
		_ = unix.Unmount(mp, mntDetach)
	}
	if len(mountsBelow(dir)) > 0 {
		return // refuse rather than risk it; the dir stays under tmp/
	}
	_ = os.RemoveAll(dir)
}

func mountsBelow(dir string) []string {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append([]string{f[4]}, out...) // deepest first
		}
	}
	return out
}

func treeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func copyFile(src, dst string) error {
	raw, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, raw, 0o644)
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }
