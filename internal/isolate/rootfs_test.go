//go:build linux

package isolate

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

const rootfsMarker = "rootfs marker\n"

// makeRootfs builds a small root filesystem in a temp dir: merged-/usr
// layout with copies of sh, id, true, sleep, cat and of the libraries they
// and this test binary need (it is re-executed inside), an /etc whose
// passwd lacks the sandbox user, a marker file at the top, and entries the
// sandbox must not see (its own /home, /tmp, /files, /sys, a fifo, a symlink
// to the host's /root). It has no /proc, /dev or /home/user: the sandbox
// brings its own.
func makeRootfs(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"usr/bin", "usr/lib", "usr/lib64", "etc", "var/tmp", "home/other", "tmp", "files", "sys"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"bin": "usr/bin", "sbin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "evil": "/root"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, rel), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("ROOTFS_MARKER", rootfsMarker, 0o644)
	write("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0o644)
	write("etc/group", "root:x:0:\n", 0o644)
	write("etc/hostname", "rootfs\n", 0o644)
	write("etc/hosts", "127.0.0.1 localhost\n", 0o644)
	write("etc/rootfs-release", "test rootfs\n", 0o644)
	write("home/other/secret", "x", 0o644)
	write("tmp/leftover", "x", 0o644)
	write("files/stale", "x", 0o644)
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bins := []string{self}
	for _, b := range []string{"sh", "id", "true", "sleep", "cat"} {
		p, err := exec.LookPath(b)
		if err != nil {
			t.Fatal(err)
		}
		copyFile(t, p, filepath.Join(root, "usr/bin", b))
		bins = append(bins, p)
	}
	// Every library (and the ELF interpreter) they load, at the same path:
	// /lib/... and /lib64/... land in usr/ through the symlinks above.
	libs := map[string]bool{}
	for _, b := range bins {
		out, err := exec.Command("ldd", b).Output()
		if err != nil {
			continue // static: nothing to copy
		}
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			for i, w := range f {
				if strings.HasPrefix(w, "/") && (i == 0 || f[i-1] == "=>") {
					libs[w] = true
				}
			}
		}
	}
	for l := range libs {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(l)), 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, l, filepath.Join(root, l))
	}
	return root
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// snapshotTree describes every entry of dir (type, mode, size, mtime, link
// target): equal snapshots mean nothing was written.
func snapshotTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		target, _ := os.Readlink(p)
		fmt.Fprintf(&b, "%s %v %d %d %s\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), target)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// runRootfsChecks verifies, from the inside, what is particular to a sandbox
// on a rootfs (started by TestRootfsContract); runChecks covers the rest.
func runRootfsChecks() int {
	failed := 0
	check := func(name string, err error) {
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", name, err)
		} else {
			fmt.Printf("ok %s\n", name)
		}
	}
	check("rootfs marker visible", func() error {
		b, err := os.ReadFile("/ROOTFS_MARKER")
		if err != nil || string(b) != rootfsMarker {
			return fmt.Errorf("%q %v", b, err)
		}
		if b, err := os.ReadFile("/etc/rootfs-release"); err != nil || string(b) != "test rootfs\n" {
			return fmt.Errorf("/etc from the rootfs: %q %v", b, err)
		}
		return nil
	}())
	check("rootfs read-only, marker too", func() error {
		if f, err := os.OpenFile("/ROOTFS_MARKER", os.O_WRONLY|os.O_APPEND, 0); err == nil {
			f.Close()
			return errors.New("marker opened for writing")
		}
		for _, p := range []string{"/usr/bin/x", "/var/x", "/etc/rootfs-release", "/ROOTFS_MARKER"} {
			if err := os.WriteFile(p, nil, 0o644); err == nil {
				return fmt.Errorf("could write %s", p)
			}
		}
		if err := os.Chmod("/usr/bin/sh", 0o777); err == nil {
			return errors.New("chmod in the rootfs worked")
		}
		return nil
	}())
	check("root holds only the rootfs and our mounts", func() error {
		ents, err := os.ReadDir("/")
		if err != nil {
			return err
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		want := "ROOTFS_MARKER bin dev etc evil files home lib lib64 proc sbin tmp usr var"
		if got := strings.Join(names, " "); got != want {
			return fmt.Errorf("/ = %s, want %s", got, want)
		}
		return nil
	}())
	check("host not visible", func() error {
		for _, p := range []string{"/work", "/root", "/evil/", "/usr/bin/python3", "/usr/bin/go", os.Getenv("HOST_ROOTFS"), os.Getenv("HOST_EXE")} {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("%s is visible", p)
			}
		}
		return nil
	}())
	check("rootfs's own home/tmp/files/sys/fifo hidden", func() error {
		for _, p := range []string{"/home/other", "/tmp/leftover", "/files/stale", "/sys", "/fifo"} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%s is visible", p)
			}
		}
		return nil
	}())
	check("etc overlays on the rootfs's files", func() error {
		h, _ := os.ReadFile("/etc/hostname")
		hosts, _ := os.ReadFile("/etc/hosts")
		if string(h) != "isotest\n" || !strings.Contains(string(hosts), "isotest") {
			return fmt.Errorf("hostname %q hosts %q", h, hosts)
		}
		return nil
	}())
	check("/var/tmp is /tmp", func() error {
		if err := os.WriteFile("/var/tmp/vt", []byte("v"), 0o644); err != nil {
			return err
		}
		if b, err := os.ReadFile("/tmp/vt"); err != nil || string(b) != "v" {
			return fmt.Errorf("%q %v", b, err)
		}
		return nil
	}())
	check("no directory fd inherited", func() error {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return err
		}
		for _, e := range ents {
			target, err := os.Readlink("/proc/self/fd/" + e.Name())
			if err != nil || strings.HasPrefix(target, "/proc/") || !strings.HasPrefix(target, "/") {
				continue // the listing's own fd, pipes, sockets
			}
			n, _ := strconv.Atoi(e.Name())
			var st unix.Stat_t
			if unix.Fstat(n, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return fmt.Errorf("fd %d is the directory %s", n, target)
			}
		}
		return nil
	}())
	// Last, as it adds to /: the caller checks that the rootfs is unchanged.
	check("root writes stay in the sandbox's tmpfs", func() error {
		if err := os.MkdirAll("/newdir/sub", 0o755); err != nil {
			return err
		}
		return os.WriteFile("/newdir/sub/f", []byte("x"), 0o644)
	}())
	if failed > 0 {
		return 1
	}
	return 0
}

// TestRootfsContract starts a sandbox on a rootfs and runs the whole
// contract (runChecks) plus the rootfs checks inside it; the rootfs must be
// byte-for-byte unchanged afterwards and the host's mount table untouched.
// As root the rootfs sits in go test's 0700 temp dir, which the sandbox's
// host uid cannot traverse: it must be reached through the fd Start opens.
func TestRootfsContract(t *testing.T) {
	if err := CheckSupport(); err != nil {
		testdep.Require(t, false, err.Error())
	}
	root := makeRootfs(t)
	before := snapshotTree(t, root)
	mountsBefore, _ := os.ReadFile("/proc/self/mountinfo")
	wd, _ := os.Getwd()
	self, _ := os.Executable()
	t0 := time.Now()
	p, out := startSandbox(t, Spec{Hostname: "isotest", HomeSizeBytes: 4 << 20, Rootfs: root}, "rootfs-checks",
		"HOST_ADDR="+hostListener(t), "HOST_CWD="+wd, "HOST_PID="+strconv.Itoa(os.Getpid()),
		"HOST_ROOTFS="+root, "HOST_EXE="+self)
	t.Logf("start on a rootfs: %v", time.Since(t0))
	all, _ := io.ReadAll(out)
	for line := range strings.Lines(string(all)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "FAIL") {
			t.Error(line)
		} else {
			t.Log(line)
		}
	}
	info, err := p.Wait()
	if err != nil || info.ExitCode != 0 {
		t.Errorf("Wait: %v %v", info, err)
	}
	if !strings.Contains(string(all), "ok rootfs marker visible") {
		t.Errorf("the rootfs checks did not run: %q", all)
	}
	if after := snapshotTree(t, root); after != before {
		t.Errorf("the rootfs changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// Other packages' tests (builds, containers) may mount concurrently: a
	// new host mount is ours only if it concerns the rootfs or /tmp.
	mountsAfter, _ := os.ReadFile("/proc/self/mountinfo")
	old := map[string]bool{}
	for l := range strings.Lines(string(mountsBefore)) {
		old[l] = true
	}
	for l := range strings.Lines(string(mountsAfter)) {
		if !old[l] {
			if f := strings.Fields(l); len(f) > 4 && (strings.HasPrefix(f[4], root) || f[4] == "/tmp") {
				t.Errorf("host mount table gained %q", l)
			} else {
				t.Logf("a concurrent host mount (not ours): %q", l)
			}
		}
	}
}

// TestRootfsUnderTmp: the child mounts its new root over /tmp, which must
// not hide a rootfs living there (it is reached through an fd).
func TestRootfsUnderTmp(t *testing.T) {
	root := makeRootfs(t)
	if !strings.HasPrefix(root, "/tmp/") {
		d, err := os.MkdirTemp("/tmp", "rootfs-")
		if err != nil {
			testdep.Require(t, false, "a writable /tmp: "+err.Error())
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		if err := os.Rename(root, filepath.Join(d, "rootfs")); err != nil {
			testdep.Require(t, false, "the test's rootfs on the same filesystem as /tmp: "+err.Error())
		}
		root = filepath.Join(d, "rootfs")
	}
	p, _ := startSandbox(t, Spec{Rootfs: root}, "exit7")
	if info, err := p.Wait(); err != nil || info.ExitCode != 7 {
		t.Fatalf("Wait: %+v %v", info, err)
	}
}

func TestRootfsErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	noEtc := filepath.Join(dir, "noetc")
	os.MkdirAll(filepath.Join(noEtc, "usr"), 0o755)
	etcLink := filepath.Join(dir, "etclink")
	os.MkdirAll(etcLink, 0o755)
	os.Symlink("/etc", filepath.Join(etcLink, "etc"))
	noPasswd := filepath.Join(dir, "nopasswd")
	os.MkdirAll(filepath.Join(noPasswd, "etc"), 0o755)
	os.WriteFile(filepath.Join(noPasswd, "etc", "group"), nil, 0o644)
	hostRoot := filepath.Join(dir, "hostroot")
	os.Symlink("/", hostRoot)
	for _, c := range []struct{ rootfs, want string }{
		{filepath.Join(dir, "missing"), "does not exist"},
		{file, "is not a directory"},
		{"/", "host's root"},
		{"/usr/..", "host's root"},
		{hostRoot, "host's root"},
		{noEtc, "no /etc directory"},
		{etcLink, "no /etc directory"},
		{noPasswd, "no /etc/passwd"},
	} {
		_, err := Start(context.Background(), Spec{Rootfs: c.rootfs, Args: []string{"isolate.test"}, Env: []string{"ISOLATE_TEST_MODE=exit7"}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Rootfs %s: got %v, want an error saying %q", c.rootfs, err, c.want)
		}
	}
}

// TestRootfsNeedsInterpreter: a dynamically linked init with no dynamic
// loader in the rootfs is refused before anything starts, saying why.
func TestRootfsNeedsInterpreter(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	dynamic := false
	for _, p := range ef.Progs {
		dynamic = dynamic || p.Type == elf.PT_INTERP
	}
	ef.Close()
	if !dynamic {
		t.Skip("this test binary is static")
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "passwd"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "etc", "group"), nil, 0o644)
	_, err = Start(context.Background(), Spec{Rootfs: root, Args: []string{"isolate.test"}, Env: []string{"ISOLATE_TEST_MODE=exit7"}})
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("got %v, want a dynamic-linking error", err)
	}
	t.Log(err)
}

// TestUnprivileged re-runs the contract tests (host directories and rootfs)
// as an ordinary user (nobody), as most users will run: user namespaces
// without root and without a writable cgroup. Run as non-root the tests above
// already are that; as root this covers both modes in one go test run.
func TestUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged: the other tests cover this mode")
	}
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	setpriv, err := exec.LookPath("setpriv")
	testdep.Require(t, err == nil, "setpriv (util-linux)")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy nobody can execute, in a directory nobody can traverse and
	// use as its temp dir.
	dir, err := os.MkdirTemp("", "isolate-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "isolate.test")
	copyFile(t, self, bin)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin,
		"-test.run", "^(TestSandboxContract|TestRootfsContract|TestRootfsUnderTmp|TestRootfsErrors|TestExitCode)$", "-test.v", "-test.count=1")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "TMPDIR=" + tmp}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRootfsContract") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	var passed []string
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "--- ") {
			passed = append(passed, strings.TrimSpace(line))
		}
	}
	sort.Strings(passed)
	t.Logf("as nobody: %s", strings.Join(passed, "; "))
}

// TestRootfsStartCost: a rootfs costs one bind per top-level entry more
// than the host's eight system directories; report what that adds.
func TestRootfsStartCost(t *testing.T) {
	root := makeRootfs(t)
	const n = 10
	for _, c := range []struct {
		name string
		spec Spec
	}{{"host directories", Spec{}}, {"rootfs", Spec{Rootfs: root}}} {
		var total time.Duration
		for i := 0; i < n; i++ {
			t0 := time.Now()
			p, out := startSandbox(t, c.spec, "idle")
			total += time.Since(t0)
			out.ReadString('\n')
			p.Kill()
			p.Wait()
			p.Cleanup()
		}
		t.Logf("%s: Start -> child ready %.1f ms average over %d", c.name, float64(total.Microseconds())/1000/n, n)
	}
}
