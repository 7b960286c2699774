package environment

import (
	"context"
	"os"
	"path/filepath"
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
