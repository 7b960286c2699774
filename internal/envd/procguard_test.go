//go:build linux

package envd

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
)

// TestFilesAPIDoesNotReachProc: the agent serving the files API runs as
// the sandbox's user, so /proc there is its own process. Symlinks planted
// by user code into it (plain, through /proc/self, through a magic link
// such as /proc/self/fd/N) and /proc itself are refused by every
// operation; the link itself can still be listed, stat'ed and removed,
// with its raw target only. (Before: /proc/self/maps and cmdline were
// served, /proc/1/fd listed.)
func TestFilesAPIDoesNotReachProc(t *testing.T) {
	env := newTestEnv(t)
	links := map[string]string{"environ": "/proc/self/environ", "maps": "/proc/self/maps", "stderr": "/proc/self/fd/2",
		"viaroot": "/proc/self/root/etc/hostname", "procdir": "/proc/self", "chain": filepath.Join(env.home, "maps")}
	for n, target := range links {
		if err := os.Symlink(target, filepath.Join(env.home, n)); err != nil {
			t.Fatal(err)
		}
	}
	for n := range links {
		p := filepath.Join(env.home, n)
		resp, b := get(t, filesURL(env.url, "path", p))
		if resp.StatusCode == http.StatusOK {
			t.Errorf("download through %s -> %s served %d bytes", n, links[n], len(b))
		}
		resp, b = post(t, filesURL(env.url, "path", p), "application/octet-stream", strings.NewReader("hostile\n"))
		if resp.StatusCode == http.StatusOK {
			t.Errorf("upload through %s -> %s accepted: %s", n, links[n], b)
		}
	}
	ctx := context.Background()
	fs := env.fs()
	for _, p := range []string{"/proc/self/fd", "/proc/1", filepath.Join(env.home, "procdir")} {
		if _, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: p, Depth: 1})); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("list %s: %v, want permission denied", p, err)
		}
	}
	if _, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/proc/self/environ"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("stat /proc/self/environ: %v, want permission denied", err)
	}
	// The links themselves: listed with their raw target (viaroot leads
	// back to /etc/hostname, the same file for everyone), removable.
	res, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: env.home, Depth: 1}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Msg.GetEntries() {
		if want, ok := links[e.GetName()]; ok && e.GetName() != "viaroot" && e.GetName() != "chain" && e.GetSymlinkTarget() != want {
			t.Errorf("%s lists with target %q, want its raw %q", e.GetName(), e.GetSymlinkTarget(), want)
		}
	}
	if _, err := fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: filepath.Join(env.home, "stderr")})); err != nil {
		t.Errorf("removing the link itself: %v", err)
	}
	// A regular file still works.
	if resp, b := post(t, filesURL(env.url, "path", filepath.Join(env.home, "ok")), "application/octet-stream", strings.NewReader("ok")); resp.StatusCode != http.StatusOK {
		t.Errorf("upload of a plain file: %d %s", resp.StatusCode, b)
	}
}

// TestProcGuardWhenFstatfsFails: gVisor answers fstatfs on an O_PATH
// descriptor with ENOSYS. The guard then places the file by its device,
// and a file it can't place at all is refused: a failed check never means
// "not procfs". (Before: the failure read as "not procfs", and a symlink
// to /proc/self/environ was opened.)
func TestProcGuardWhenFstatfsFails(t *testing.T) {
	defer func(f func(int, *unix.Statfs_t) error) { fstatfs = f }(fstatfs)
	fstatfs = func(int, *unix.Statfs_t) error { return unix.ENOSYS }
	env := newTestEnv(t)
	for n, target := range map[string]string{"environ": "/proc/self/environ", "status": "/proc/self/status", "sysctl": "/proc/sys/kernel/hostname"} {
		p := filepath.Join(env.home, n)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if resp, b := get(t, filesURL(env.url, "path", p)); resp.StatusCode != http.StatusForbidden {
			t.Errorf("download through %s -> %s: %d %q, want 403", n, target, resp.StatusCode, b)
		}
	}
	plain := filepath.Join(env.home, "plain.txt")
	if err := os.WriteFile(plain, []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if resp, b := get(t, filesURL(env.url, "path", plain)); resp.StatusCode != http.StatusOK || string(b) != "plain\n" {
		t.Errorf("download of a plain file with fstatfs failing: %d %q", resp.StatusCode, b)
	}
	// Neither question answered: refused.
	defer func(f func(int, *unix.Stat_t) error) { fstat = f }(fstat)
	fstat = func(int, *unix.Stat_t) error { return unix.ENOSYS }
	if resp, b := get(t, filesURL(env.url, "path", plain)); resp.StatusCode != http.StatusForbidden {
		t.Errorf("download with the file system unknown: %d %q, want 403", resp.StatusCode, b)
	}
}

// TestProcGuardUncheckablePathRefused: a path the guard can't open to
// check (here: a directory without search permission, for a non-root
// agent) is refused with the error it met, not let through.
func TestProcGuardUncheckablePathRefused(t *testing.T) {
	if err := procRefusal("/nonexistent-dir/sub/file"); err != nil {
		t.Errorf("a path to be created: %v", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := procRefusal(filepath.Join(f, "below"))
	var pe *os.PathError
	if !errors.As(err, &pe) || !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("a path below a file: %v, want a check error (ENOTDIR)", err)
	}
	if err := guardProcHTTP(filepath.Join(f, "below"), true); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("guardProcHTTP: %v", err)
	}
}
