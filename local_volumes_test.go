package sandboxes_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// A host directory given as a volume is the sandbox's, read-write, at the
// path asked (a new directory under an empty /mnt of its own), and what
// the sandbox writes there is on the host after it ends.
func TestLocalVolumeMount(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // the sandbox's user is a host uid of its own
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from host"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := newLocal(t, func(c *sandboxes.Config) {
		c.Volumes = []sandboxes.VolumeMount{{Source: dir, Path: "/mnt/data"}}
	})
	ex := runOut(t, sb, `print(open("/mnt/data/in.txt").read()); open("/mnt/data/out.txt","w").write("from sandbox")`)
	if ex.Error != nil || strings.TrimSpace(ex.Stdout()) != "from host" {
		t.Fatalf("%q %v", ex.Stdout(), ex.Error)
	}
	_ = sb.Close()
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(b) != "from sandbox" {
		t.Fatalf("on the host: %q %v", b, err)
	}
}

// Volume paths and sources that can't work are refused before anything
// starts, with ErrInvalidConfig; a variant without volumes refuses them.
func TestVolumeMountRefused(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range [][]sandboxes.VolumeMount{
		{{Source: dir, Path: "rel"}},
		{{Source: dir, Path: "/"}},
		{{Source: dir, Path: "/proc/x"}},
		{{Source: dir, Path: "/sys"}},
		{{Source: dir, Path: "/dev/shm"}},
		{{Source: dir, Path: "/mnt/../etc"}},
		{{Source: dir, Path: "/home/user"}},
		{{Source: "", Path: "/mnt/a"}},
		{{Source: dir, Path: "/mnt/a"}, {Source: dir, Path: "/mnt/a/b"}},
		{{Source: "relative/dir", Path: "/mnt/a"}},
		{{Source: link, Path: "/mnt/a"}},
		{{Source: filepath.Join(dir, "missing"), Path: "/mnt/a"}},
	} {
		cfg := sandboxes.Config{Volumes: v, Options: local.Options{RuntimeDir: t.TempDir()}}
		sb, err := sandboxes.Create(ctx, cfg)
		if err == nil {
			_ = sb.Close()
			t.Errorf("%+v: created", v)
			continue
		}
		if !errors.Is(err, sandboxes.ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", v, err)
		}
	}
	for _, p := range []string{"/mnt/data", "/home/user/data", "/data", "/workspace/x"} {
		if err := sandboxes.CheckVolumePath(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// With an environment's rootfs, whose /mnt is an empty read-only
// directory of the image, the volume still mounts at /mnt/data (a small
// tmpfs holds the mount point, hiding nothing); a path in a non-empty
// read-only directory of the image is refused with what to do.
func TestLocalVolumeMountRootfs(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sb := newLocal(t, func(c *sandboxes.Config) {
		c.Environment = "python"
		c.Volumes = []sandboxes.VolumeMount{{Source: dir, Path: "/mnt/data"}}
	})
	ex := runOut(t, sb, `open("/mnt/data/f","w").write("rootfs"); import os; print(sorted(os.listdir("/mnt")))`)
	if ex.Error != nil || strings.TrimSpace(ex.Stdout()) != "['data']" {
		t.Fatalf("%q %v", ex.Stdout(), ex.Error)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "rootfs" {
		t.Fatalf("on the host: %q %v", b, err)
	}
	cfg := localConfig(t)
	cfg.Environment = "python"
	cfg.Volumes = []sandboxes.VolumeMount{{Source: dir, Path: "/var/lib/x"}}
	// A runtime directory of its own: the failed sandbox's supervisor
	// removes its directory as it exits, which may be after this test.
	rt := t.TempDir()
	cfg.Options = local.Options{RuntimeDir: rt}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if sb, err := sandboxes.Create(ctx, cfg); err == nil {
		_ = sb.Close()
		t.Fatal("created with a volume inside the image's /var/lib")
	} else if !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("refusal doesn't say why: %v", err)
	}
	// Nothing of it stays (waiting for the condition, bounded).
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, _ := os.ReadDir(rt)
		n := 0
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && len(e.Name()) == 32 {
				n++
			}
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failed sandbox left %d directories in %s", n, rt)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
