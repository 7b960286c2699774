package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// volumes create, exec --volume NAME:/path in two sandboxes (the second
// reads what the first wrote), list, rm; a bad --volume is refused with
// what to write instead.
func TestCLIVolumes(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	vdir := t.TempDir()
	t.Setenv("CODE_SANDBOXES_VOLUME_DIR", vdir)
	if out, errs, code := cli(t, "", "volumes", "create", "work"); code != 0 || strings.TrimSpace(out) != filepath.Join(vdir, "work") {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	if _, errs, code := cli(t, "", "volumes", "create", "work"); code == 0 || !strings.Contains(errs, "exists") {
		t.Fatalf("create twice: %d %q", code, errs)
	}
	if out, errs, code := cli(t, "", "exec", "--volume", "work:/mnt/w", `open("/mnt/w/f","w").write("one")`); code != 0 {
		t.Fatalf("exec writes: %d %q %q", code, out, errs)
	}
	if out, errs, code := cli(t, "", "exec", "--volume", "work:/home/user/w", `print(open("/home/user/w/f").read())`); code != 0 || strings.TrimSpace(out) != "one" {
		t.Fatalf("exec reads: %d %q %q", code, out, errs)
	}
	if out, _, code := cli(t, "", "volumes", "list"); code != 0 || !strings.HasPrefix(out, "work\t") {
		t.Fatalf("list: %d %q", code, out)
	}
	for _, bad := range []string{"work", "missing:/mnt/x", "work:/proc/x", "../x:/mnt/x"} {
		if _, errs, code := cli(t, "", "exec", "--volume", bad, "1"); code == 0 || !strings.Contains(errs, "volume") {
			t.Errorf("--volume %s: %d %q", bad, code, errs)
		}
	}
	if _, errs, code := cli(t, "", "volumes", "rm", "work"); code != 0 {
		t.Fatalf("rm: %d %q", code, errs)
	}
	if _, err := os.Stat(filepath.Join(vdir, "work")); !os.IsNotExist(err) {
		t.Fatalf("still there: %v", err)
	}
}
