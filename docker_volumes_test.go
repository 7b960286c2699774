//go:build linux

package sandboxes_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// The docker variant binds a volume's host directory read-write at the
// path asked; what the sandbox writes is on the host.
func TestDockerVolumeMount(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // the sandbox's user is a host uid of its own
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from host"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := newDocker(t, func(c *sandboxes.Config) {
		c.Volumes = []sandboxes.VolumeMount{{Source: dir, Path: "/mnt/data"}}
	})
	ex := runOut(t, sb, `print(open("/mnt/data/in.txt").read()); open("/mnt/data/out.txt","w").write("from sandbox")`)
	if ex.Error != nil || strings.TrimSpace(ex.Stdout()) != "from host" {
		t.Fatalf("%q %v", ex.Stdout(), ex.Error)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(b) != "from sandbox" {
		t.Fatalf("on the host: %q %v", b, err)
	}
}
