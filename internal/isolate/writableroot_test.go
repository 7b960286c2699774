//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// runWritableRootChecks runs in a sandbox with a 4 MiB root (TestWritableRoot):
// the root directory takes new entries, what it holds from the host stays
// read-only, and the tmpfs's size and inode count bound it.
func runWritableRootChecks() int {
	failed := 0
	check := func(name string, err error) {
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", name, err)
		} else {
			fmt.Printf("ok %s\n", name)
		}
	}
	probe := os.Getenv("PROBE")
	check("mkdir and write at /", func() error {
		if err := os.MkdirAll("/"+probe+"/a/b", 0o755); err != nil {
			return err
		}
		if err := os.WriteFile("/"+probe+"/a/b/f", []byte("x"), 0o644); err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Stat("/"+probe, &st); err != nil || st.Uid != SandboxUID || st.Gid != SandboxGID {
			return fmt.Errorf("owner %d:%d (%v)", st.Uid, st.Gid, err)
		}
		return os.WriteFile("/"+probe+"-file", []byte("y"), 0o644)
	}())
	check("system dirs still read-only", func() error {
		for _, p := range []string{"/usr/x", "/etc/x", "/bin/x", "/lib/x", "/etc/passwd", "/etc/hosts"} {
			if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
				f.Close()
				return fmt.Errorf("could write %s", p)
			}
		}
		return nil
	}())
	check("mount points can be neither moved nor removed", func() error {
		for _, p := range []string{"/usr", "/etc", "/proc", "/dev", "/tmp", "/home/user", "/files"} {
			if err := os.Rename(p, "/"+probe+"-moved"); err == nil {
				return fmt.Errorf("renamed %s", p)
			}
			if err := os.Remove(p); err == nil {
				return fmt.Errorf("removed %s", p)
			}
		}
		// /etc/passwd is a bind of its own, over the read-only /etc.
		if err := os.Rename("/etc/passwd", "/"+probe+"-passwd"); err == nil {
			return errors.New("renamed /etc/passwd")
		}
		return nil
	}())
	check("size bounded", func() error {
		f, err := os.Create("/big")
		if err != nil {
			return err
		}
		defer os.Remove("/big")
		defer f.Close()
		if _, err := f.Write(make([]byte, 5<<20)); !errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("wrote 5 MiB into a 4 MiB root: %v", err)
		}
		return nil
	}())
	check("inodes bounded", func() error {
		if err := os.Mkdir("/many", 0o755); err != nil {
			return err
		}
		defer os.RemoveAll("/many")
		// 4 MiB gives TmpfsInodes(4 MiB) = 1024 inodes.
		for i := range 4096 {
			f, err := os.Create("/many/" + strconv.Itoa(i))
			if err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					return nil
				}
				return err
			}
			f.Close()
		}
		return errors.New("created 4096 files in a root of 1024 inodes")
	}())
	if failed > 0 {
		return 1
	}
	return 0
}

// runRootAbsentChecks runs in a second sandbox: it sees nothing the first
// wrote at its root.
func runRootAbsentChecks() int {
	probe := os.Getenv("PROBE")
	for _, p := range []string{"/" + probe, "/" + probe + "-file"} {
		if _, err := os.Lstat(p); err == nil {
			fmt.Printf("FAIL %s of another sandbox is visible\n", p)
			return 1
		}
	}
	fmt.Println("ok nothing of the other sandbox")
	return 0
}

// TestWritableRoot: user code writes at the root directory (mkdir /x, an
// upload to /0/file) as on E2B, and the attack view of it: the system
// directories stay read-only, the mount points can't be moved away, the
// root's tmpfs is bounded in bytes and inodes, and what one sandbox wrote
// reaches neither the host (whose /tmp the child's new root was first
// mounted over) nor another sandbox, nor outlives the sandbox.
func TestWritableRoot(t *testing.T) {
	if err := CheckSupport(); err != nil {
		testdep.Require(t, false, err.Error())
	}
	probe := "cs-writable-root-" + strconv.Itoa(os.Getpid())
	mountsBefore, _ := os.ReadFile("/proc/self/mountinfo")
	p, out := startSandbox(t, Spec{RootSizeBytes: 4 << 20}, "writable-root", "PROBE="+probe)
	all, _ := io.ReadAll(out)
	for line := range strings.Lines(string(all)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "FAIL") {
			t.Error(line)
		} else {
			t.Log(line)
		}
	}
	if !strings.Contains(string(all), "ok inodes bounded") {
		t.Errorf("the checks did not all run: %q", all)
	}
	if info, err := p.Wait(); err != nil || info.ExitCode != 0 {
		t.Errorf("Wait: %v %v", info, err)
	}
	for _, dir := range []string{"/", "/tmp", os.TempDir()} {
		for _, name := range []string{probe, probe + "-file", probe + "-moved", probe + "-passwd"} {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				t.Errorf("the sandbox's %s reached the host's %s", name, dir)
			}
		}
	}
	mountsAfter, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Count(string(mountsAfter), " /tmp ") != strings.Count(string(mountsBefore), " /tmp ") {
		t.Errorf("the host's mounts on /tmp changed:\n%s", mountsAfter)
	}
	p2, out2 := startSandbox(t, Spec{}, "root-absent", "PROBE="+probe)
	all2, _ := io.ReadAll(out2)
	if info, err := p2.Wait(); err != nil || info.ExitCode != 0 {
		t.Errorf("second sandbox: %s %v %v", all2, info, err)
	}
}
