package environment

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostWritesStayInRootfs: an image whose /etc and /tmp are symlinks to
// host paths (etc -> /root) must not make the build write there: every
// host-side write into the rootfs resolves symlinks inside it.
func TestHostWritesStayInRootfs(t *testing.T) {
	host := t.TempDir() // stands for /root: nothing may appear here
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(rootfs, "etc")); err != nil {
		t.Fatal(err)
	}
	// tmp -> a host path outside /tmp (where host itself is).
	hostSrv := "/srv/code-sandboxes-escape-" + filepath.Base(host)
	if err := os.Symlink(hostSrv, filepath.Join(rootfs, "tmp")); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(hostSrv)
	b := &builder{spec: &Spec{Name: "x"}, in: &inputs{}, rootfs: rootfs}
	check := func(when string) {
		t.Helper()
		ents, _ := os.ReadDir(host)
		for _, e := range ents {
			t.Errorf("%s: the build wrote %s outside the rootfs", when, filepath.Join(host, e.Name()))
			os.RemoveAll(filepath.Join(host, e.Name()))
		}
	}
	if _, err := os.Stat("/etc/resolv.conf"); err == nil {
		restore, err := b.withResolver()
		check("resolver")
		if err == nil {
			restore()
		}
	}
	_ = b.files(context.Background())
	check("manifest")
	// The pip lock's path, as pipInstall writes it: through a dangling
	// symlink it is refused (the image is broken), never written outside.
	err := writeInRootfs(rootfs, "tmp/.code-sandboxes-lock.txt", []byte("x"), 0o644)
	if _, lerr := os.Lstat(hostSrv); lerr == nil {
		t.Errorf("pip lock: the build created %s on the host", hostSrv)
	}
	if err == nil {
		if _, err := os.Stat(filepath.Join(rootfs, hostSrv, ".code-sandboxes-lock.txt")); err != nil {
			t.Errorf("the write did not land inside the rootfs: %v", err)
		}
	}
}

// TestCopyAndContractStayInRootfs: the image's directories are symlinks to
// host directories (srv -> a host dir, home -> another, etc/passwd -> a
// host file): a copy step into them, a workdir step and the sandbox
// contract (mount points, /etc/passwd and /etc/group lines, hosts) must
// write only inside the rootfs, never through those links.
func TestCopyAndContractStayInRootfs(t *testing.T) {
	hostSrv, hostHome, hostEtc := t.TempDir(), t.TempDir(), t.TempDir()
	hostPasswd := filepath.Join(hostEtc, "passwd")
	if err := os.WriteFile(hostPasswd, []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The targets exist inside the rootfs too (a dangling one is refused):
	// a write must land there, never on the host's.
	for _, d := range []string{hostSrv, hostHome, hostEtc} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"srv": hostSrv, "home": hostHome, "etc/passwd": hostPasswd, "etc/group": hostPasswd} {
		if err := os.Symlink(target, filepath.Join(rootfs, link)); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range map[string]string{"app/main.py": "print(1)\n", "app/sub/x.txt": "x\n"} {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(content))
	}
	_ = tw.Close()
	_ = gz.Close()
	archive := filepath.Join(t.TempDir(), "files.tar.gz")
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &builder{spec: &Spec{Name: "x", Steps: []Step{{Workdir: "/srv/work"}, {Copy: &CopyStep{Archive: archive, Src: "app", Dest: "/srv/app/"}}}},
		in: &inputs{}, rootfs: rootfs, work: t.TempDir(), p: newProgress(nil), logw: io.Discard}
	if err := b.runSteps(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.contract(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{hostSrv, hostHome} {
		if ents, _ := os.ReadDir(d); len(ents) > 0 {
			t.Errorf("a host directory behind an image symlink was written: %s has %v", d, ents)
		}
	}
	if raw, _ := os.ReadFile(hostPasswd); string(raw) != "root:x:0:0::/root:/bin/sh\n" {
		t.Errorf("a host file behind an image symlink was written: %q", raw)
	}
	// Where the writes went: inside the rootfs, resolved there.
	if _, err := os.Stat(filepath.Join(rootfs, hostSrv, "app/sub/x.txt")); err != nil {
		t.Errorf("the copy did not land inside the rootfs: %v", err)
	}
	// /etc/passwd led nowhere inside the rootfs: the entry itself became
	// the file.
	if raw, err := readInRootfs(rootfs, "etc/passwd", 1<<20); err != nil || !strings.Contains(string(raw), "user:x:1000:100") {
		t.Errorf("the contract's passwd line, inside the rootfs: %q %v", raw, err)
	}
}
