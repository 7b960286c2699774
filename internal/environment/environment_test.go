//go:build linux

package environment

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestSpecValidation(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"name: Bad_Name\nbase: {debian: bookworm}", "DNS label"},
		{"name: x\nbase: {}", "exactly one of"},
		{"name: x\nbase: {debian: bookworm, image: a/b}", "exactly one of"},
		{"name: x\nbase: {host: true}\napt: [curl]", "host base can add only env"},
		{"name: x\nbase: {debian: bookworm}\napt: ['curl; rm -rf /']", "Debian package name"},
		{"name: x\nbase: {debian: bookworm}\nfiles: [{path: etc/x}]", "clean absolute path"},
		{"name: x\nbase: {debian: bookworm}\nfiles: [{path: /home/user/x, content: a}]", "mounted fresh"},
		{"name: x\nbase: {debian: bookworm}\nfiles: [{path: /etc/x, content: a, mode: '999'}]", "octal"},
		{"name: x\nbase: {debian: bookworm}\nenv: {'A B': c}", "valid variable name"},
		{"name: x\nbase: {debian: bookworm}\npip: {index: http://x}", "pip.lock"},
		{"name: x\nbase: {debian: bookworm}\nunknown: 1", "not found"},
		{"name: x\nbase: {debian: bookworm, mirror: 'ftp://x'}", "http(s)://"},
	} {
		_, err := ParseSpec([]byte(c.yaml), t.TempDir())
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want ErrInvalidSpec mentioning %q", c.yaml, err, c.want)
		}
	}
	s, err := ParseSpec([]byte("name: ok\nbase: {debian: bookworm}\napt: [python3, libc6=2.36-9]\nenv: {A: b}"), "")
	if err != nil || s.Base.Debian != "bookworm" || len(s.Apt) != 2 {
		t.Fatalf("valid spec: %v %+v", err, s)
	}
}

func TestCheckLock(t *testing.T) {
	good := "# comment\nfoo==1.0 \\\n    --hash=sha256:" + strings.Repeat("a", 64) + "\n\nbar==2 --hash=sha256:" + strings.Repeat("b", 64) + "  # why\n"
	if err := checkLock([]byte(good)); err != nil {
		t.Fatalf("good lock refused: %v", err)
	}
	for lock, want := range map[string]string{
		"foo>=1.0 --hash=sha256:aa\n":              "line 1: pin an exact version",
		"ok==1 --hash=sha256:aa\nfoo==1.0\n":       "line 2: add --hash",
		"--index-url http://evil\nfoo==1 --hash=x": "options",
	} {
		if err := checkLock([]byte(lock)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", lock, err, want)
		}
	}
}

func TestBuildIDCoversInputs(t *testing.T) {
	s := &Spec{Name: "x", Base: Base{Debian: "bookworm"}, Files: []File{{Path: "/etc/x"}}}
	a := digest(s, &inputs{Mirror: "http://m", Files: map[string][]byte{"/etc/x": []byte("1")}})
	b := digest(s, &inputs{Mirror: "http://m", Files: map[string][]byte{"/etc/x": []byte("2")}})
	c := digest(s, &inputs{Mirror: "http://other", Files: map[string][]byte{"/etc/x": []byte("1")}})
	a2 := digest(&Spec{Name: "x", Description: "changed", Base: Base{Debian: "bookworm"}, Files: []File{{Path: "/etc/x"}}},
		&inputs{Mirror: "http://m", Files: map[string][]byte{"/etc/x": []byte("1")}})
	if a == b || a == c || a != a2 || len(a) != 64 {
		t.Fatalf("ids: %s %s %s %s", a, b, c, a2)
	}
}

// layer builds an uncompressed tar layer from entries.
func layer(t *testing.T, entries []tar.Header, content map[string]string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		h.Size = int64(len(content[h.Name]))
		if h.Mode == 0 {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(content[h.Name]))
	}
	_ = tw.Close()
	raw := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage has two layers exercising what an extractor gets wrong:
// whiteouts, hard links, and an absolute symlink that a later entry writes
// through (it must land inside the rootfs, not on the host). (".." names
// are refused by go-containerregistry before they reach us.)
func testImage(t *testing.T) v1.Image {
	l1 := layer(t, []tar.Header{
		{Name: "usr/", Typeflag: tar.TypeDir}, {Name: "usr/bin/", Typeflag: tar.TypeDir},
		{Name: "usr/bin/python3", Typeflag: tar.TypeReg},
		{Name: "etc/", Typeflag: tar.TypeDir},
		{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "etc/doomed", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "escape", Typeflag: tar.TypeSymlink, Linkname: "/tmp/code-sandboxes-escape-test"},
		{Name: "escape/evil", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "data/", Typeflag: tar.TypeDir},
		{Name: "data/owned", Typeflag: tar.TypeReg, Mode: 0o640, Uid: 1234, Gid: 567},
	}, map[string]string{"usr/bin/python3": "#!/bin/sh\n", "etc/os-release": "ID=test\n", "etc/doomed": "x", "data/owned": "o", "escape/evil": "evil"})
	l2 := layer(t, []tar.Header{
		{Name: "etc/.wh.doomed", Typeflag: tar.TypeReg},
		{Name: "data/hard", Typeflag: tar.TypeLink, Linkname: "data/owned"},
	}, nil)
	img, err := mutate.AppendLayers(empty.Image, l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func checkImageRootfs(t *testing.T, b *Build) {
	t.Helper()
	r := b.Rootfs()
	read := func(p string) string {
		raw, err := os.ReadFile(filepath.Join(r, p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		return string(raw)
	}
	if read("etc/os-release") != "ID=test\n" || read("etc/hello") != "hi\n" {
		t.Error("layer or spec file content wrong")
	}
	if _, err := os.Lstat(filepath.Join(r, "etc/doomed")); !os.IsNotExist(err) {
		t.Errorf("whiteout not applied: %v", err)
	}
	if _, err := os.Stat("/tmp/code-sandboxes-escape-test/evil"); err == nil {
		os.RemoveAll("/tmp/code-sandboxes-escape-test")
		t.Fatal("an image entry was written outside the rootfs through a symlink")
	}
	a, _ := os.Stat(filepath.Join(r, "data/owned"))
	h, _ := os.Stat(filepath.Join(r, "data/hard"))
	if a == nil || h == nil || !os.SameFile(a, h) || a.Mode().Perm() != 0o640 {
		t.Errorf("hard link or mode lost: %v %v", a, h)
	}
	if os.Geteuid() == 0 && (ownerOf(a) != [2]int{1234, 567}) {
		t.Errorf("owner lost: %v", ownerOf(a))
	}
	if fi, err := os.Stat(filepath.Join(r, "etc/hello")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("spec file mode: %v %v", fi, err)
	}
	if !strings.Contains(read("etc/passwd"), "user:x:1000:100:") || !strings.Contains(read("etc/code-sandboxes/environment.json"), b.ID) {
		t.Error("contract user or manifest missing")
	}
	if !strings.Contains(read("etc/hosts"), "localhost") {
		t.Error("/etc/hosts must let localhost resolve")
	}
	for _, d := range []string{"home/user", "files", "tmp", "proc", "dev"} {
		if fi, err := os.Stat(filepath.Join(r, d)); err != nil || !fi.IsDir() {
			t.Errorf("mount point /%s missing", d)
		}
	}
	if b.Env["GREETING"] != "hello" {
		t.Errorf("env: %v", b.Env)
	}
}

const imageSpecTail = `
files:
  - {path: /etc/hello, content: "hi\n", mode: "0600"}
env: {GREETING: hello}
`

func TestBuildFromRegistryImage(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	ref, err := name.ParseReference(host+"/test/base:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, testImage(t)); err != nil {
		t.Fatal(err)
	}
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ParseSpec([]byte("name: fromreg\nbase: {image: "+ref.String()+", insecure: true}\n"+imageSpecTail), "")
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	b, err := st.Build(ctxT(t, time.Minute), spec, BuildOptions{Progress: &log})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "[1/4] pull and unpack image") {
		t.Errorf("progress lines: %s", log.String())
	}
	checkImageRootfs(t, b)
	// Cached: same id, nothing rebuilt; Resolve by name and prefix agree.
	log.Reset()
	b2, err := st.Build(ctxT(t, time.Minute), spec, BuildOptions{Progress: &log})
	if err != nil || b2.ID != b.ID || !strings.Contains(log.String(), "cached build") {
		t.Fatalf("second build: %v %s %q", err, b2.ID, log.String())
	}
	for _, r := range []string{"fromreg", b.ID, b.ID[:12], "sha256:" + b.ID} {
		if got, err := st.Resolve(r); err != nil || got.ID != b.ID {
			t.Errorf("Resolve(%s): %v", r, err)
		}
	}
	// A new tag content means a new id.
	img2, _ := mutate.AppendLayers(testImage(t), layer(t, []tar.Header{{Name: "new", Typeflag: tar.TypeReg}}, nil))
	if err := remote.Write(ref, img2); err != nil {
		t.Fatal(err)
	}
	b3, err := st.Build(ctxT(t, time.Minute), spec, BuildOptions{})
	if err != nil || b3.ID == b.ID {
		t.Fatalf("retagged image must give a new build id: %v", err)
	}
	if got, _ := st.Resolve("fromreg"); got == nil || got.ID != b3.ID {
		t.Error("the name must point at the newest build")
	}
	if _, err := st.Remove("fromreg"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Resolve(b3.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("removed build still resolves: %v", err)
	}
	if _, err := st.Resolve(b.ID); err != nil {
		t.Errorf("the older build must stay: %v", err)
	}
}

func TestBuildFromTarball(t *testing.T) {
	dir := t.TempDir()
	tag, _ := name.NewTag("test/base:1")
	if err := tarball.WriteToFile(filepath.Join(dir, "img.tar"), tag, testImage(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "env.yaml"), []byte("name: fromtar\nbase: {tarball: img.tar}\n"+imageSpecTail), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := ReadSpec(filepath.Join(dir, "env.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := Open(t.TempDir())
	b, err := st.Build(ctxT(t, time.Minute), spec, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkImageRootfs(t, b)
	if b.Base == "" || !strings.HasPrefix(b.Base, "tarball img.tar") {
		t.Errorf("base: %q", b.Base)
	}
}

// TestBuildSweepsCrashedWorkDir: a build that died (serve killed mid-build)
// leaves its work dir under tmp/ and publishes no name; the next build of
// the same id removes it.
func TestBuildSweepsCrashedWorkDir(t *testing.T) {
	dir := t.TempDir()
	tag, _ := name.NewTag("test/base:1")
	if err := tarball.WriteToFile(filepath.Join(dir, "img.tar"), tag, testImage(t)); err != nil {
		t.Fatal(err)
	}
	spec, err := ParseSpec([]byte("name: crashed\nbase: {tarball: img.tar}\n"+imageSpecTail), dir)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := Open(t.TempDir())
	b, err := st.Build(ctxT(t, time.Minute), spec, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(st.Dir, "tmp", b.ID[:12]+"-crashed")
	if err := os.MkdirAll(filepath.Join(crashed, "rootfs", "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Build(ctxT(t, time.Minute), spec, BuildOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(crashed); err == nil {
		t.Error("the crashed build's work dir is still there")
	}
}

func TestBuildFailureLeavesNothing(t *testing.T) {
	// An image without python3 fails the last step; the store keeps no
	// build, no name and no work dir, only the log.
	img, _ := mutate.AppendLayers(empty.Image, layer(t, []tar.Header{{Name: "etc/", Typeflag: tar.TypeDir}}, nil))
	dir := t.TempDir()
	tag, _ := name.NewTag("test/nopy:1")
	_ = tarball.WriteToFile(filepath.Join(dir, "img.tar"), tag, img)
	spec, err := ParseSpec([]byte("name: nopy\nbase: {tarball: img.tar}\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := Open(t.TempDir())
	_, err = st.Build(ctxT(t, time.Minute), spec, BuildOptions{})
	if !errors.Is(err, ErrBuildFailed) || !strings.Contains(err.Error(), "no /usr/bin/python3") {
		t.Fatalf("got %v", err)
	}
	if bs, _ := st.List(); len(bs) != 0 || len(st.Names()) != 0 {
		t.Error("a failed build left a build or a name")
	}
	ents, _ := os.ReadDir(filepath.Join(st.Dir, "tmp"))
	for _, e := range ents {
		if e.IsDir() {
			t.Errorf("work dir left behind: %s", e.Name())
		}
	}
}

// extractTar itself resolves every entry inside the root, whatever the
// stream: a symlink to an absolute host path followed by an entry through
// it, a ".." name, and a hard link to a host file.
func TestExtractTarStaysInside(t *testing.T) {
	host := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []tar.Header{
		{Name: "escape", Typeflag: tar.TypeSymlink, Linkname: host},
		{Name: "escape/evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4},
		{Name: "../../dotdot", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4},
		{Name: "hl", Typeflag: tar.TypeLink, Linkname: "../../../../../etc/passwd"},
	} {
		_ = tw.WriteHeader(&h)
		if h.Size > 0 {
			_, _ = tw.Write([]byte("evil"))
		}
	}
	_ = tw.Close()
	root := t.TempDir()
	err := extractTar(context.Background(), &buf, root)
	if ents, _ := os.ReadDir(host); len(ents) != 0 {
		t.Fatalf("an entry escaped the root into %s", host)
	}
	if raw, _ := os.ReadFile(filepath.Join(root, host, "evil")); string(raw) != "evil" {
		t.Error("the entry through the symlink should land inside the root")
	}
	if raw, _ := os.ReadFile(filepath.Join(root, "dotdot")); string(raw) != "evil" {
		t.Error("a .. name should land inside the root")
	}
	if err == nil || !strings.Contains(err.Error(), "not a regular file in the image") {
		t.Errorf("a hard link to a path outside the image must fail: %v", err)
	}
}

func TestWriteTarRoundTrip(t *testing.T) {
	src := t.TempDir()
	_ = os.MkdirAll(filepath.Join(src, "a/b"), 0o750)
	_ = os.WriteFile(filepath.Join(src, "a/b/f"), []byte("content"), 0o604)
	_ = os.Link(filepath.Join(src, "a/b/f"), filepath.Join(src, "a/hard"))
	_ = os.Symlink("b/f", filepath.Join(src, "a/link"))
	var buf bytes.Buffer
	if err := WriteTar(context.Background(), src, &buf); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := extractTar(context.Background(), &buf, dst); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dst, "a/link"))
	f1, _ := os.Stat(filepath.Join(dst, "a/b/f"))
	f2, _ := os.Stat(filepath.Join(dst, "a/hard"))
	d, _ := os.Stat(filepath.Join(dst, "a"))
	if err != nil || string(raw) != "content" || f1.Mode().Perm() != 0o604 || !os.SameFile(f1, f2) || d.Mode().Perm() != 0o750 {
		t.Fatalf("round trip lost something: %v %q %v %v", err, raw, f1, d)
	}
}

// An exported image carries the rootfs's home at homeseed.Dir, for the
// agent to copy into the home tmpfs that hides home/user in a pod; the
// rootfs's own entry at that path is not let through, and hard links
// across the move still point at what was written.
func TestWriteTarSeedsHome(t *testing.T) {
	src := t.TempDir()
	_ = os.MkdirAll(filepath.Join(src, "home/user/.config"), 0o750)
	_ = os.WriteFile(filepath.Join(src, "home/user/.config/rc"), []byte("rc"), 0o600)
	_ = os.Link(filepath.Join(src, "home/user/.config/rc"), filepath.Join(src, "home/user/hard"))
	_ = os.MkdirAll(filepath.Join(src, homeseed.Dir, "planted"), 0o755)
	_ = os.WriteFile(filepath.Join(src, "etc"), []byte("x"), 0o644)
	var buf bytes.Buffer
	if err := writeTar(context.Background(), src, &buf, true); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := extractTar(context.Background(), &buf, dst); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(dst, homeseed.Dir)
	raw, err := os.ReadFile(filepath.Join(seed, ".config/rc"))
	f1, _ := os.Stat(filepath.Join(seed, ".config/rc"))
	f2, _ := os.Stat(filepath.Join(seed, "hard"))
	if err != nil || string(raw) != "rc" || f1 == nil || f2 == nil || !os.SameFile(f1, f2) || f1.Mode().Perm() != 0o600 {
		t.Fatalf("the seed: %q %v %v %v", raw, err, f1, f2)
	}
	if st, err := os.Stat(seed); err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("the seed's root: %v %v; want the home's mode", st, err)
	}
	if ents, err := os.ReadDir(filepath.Join(dst, "home/user")); err != nil || len(ents) != 0 {
		t.Errorf("home/user in the image: %v %v; want an empty directory", ents, err)
	}
	if _, err := os.Stat(filepath.Join(seed, "planted")); !os.IsNotExist(err) {
		t.Errorf("the rootfs's own %s went into the image (%v)", homeseed.Dir, err)
	}
	if raw, _ := os.ReadFile(filepath.Join(dst, "etc")); string(raw) != "x" {
		t.Error("the rest of the rootfs is missing")
	}
}

// A built-in name resolves to this version's build of it, never to the
// build another version left the name pointing at.
func TestBuiltinNameIsThisVersionsBuild(t *testing.T) {
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("ab", 32)
	dir := filepath.Join(st.Dir, "builds", other)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "build.json"), []byte(`{"id":"`+other+`","name":"python"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st.Dir, "names", "python"), []byte(other+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := st.Resolve("python")
	if err == nil {
		t.Fatalf("Resolve(python) = build %s: another version's build, not this one's spec", b.ID)
	}
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "environments build python") {
		t.Fatalf("Resolve(python) = %v; want ErrNotFound saying how to build it", err)
	}
	// A name of the user's own still resolves through the name.
	if err := os.WriteFile(filepath.Join(st.Dir, "names", "mine"), []byte(other+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := st.Resolve("mine"); err != nil || b.ID != other {
		t.Fatalf("Resolve(mine) = %v, %v", b, err)
	}
}
