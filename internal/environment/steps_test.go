package environment_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/testpypi"
)

// tarGz is a gzip'd tar of files, as E2B's SDK uploads a copy step.
func tarGz(t *testing.T, files map[string]string, links map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(content))
	}
	for name, target := range links {
		if err := tw.WriteHeader(&tar.Header{Name: name, Linkname: target, Typeflag: tar.TypeSymlink}); err != nil {
			t.Fatal(err)
		}
	}
	_ = tw.Close()
	_ = gz.Close()
	return buf.Bytes()
}

// TestStepsRunIsolated: a template's run steps are the caller's commands
// running as root on the build machine. Each attack a root process in a
// plain chroot could make must fail: escaping the chroot, reading or
// writing a host disk, a host sysctl, sysrq, mounting, making a device
// node. One build tries them all (a build copies the python rootfs, which
// is slow on a busy machine) and records each outcome in the rootfs; a
// control that root must still be able to do (chown, apt's setuid) proves
// the step really ran as root.
func TestStepsRunIsolated(t *testing.T) {
	st, _ := pythonStore(t)
	canary := filepath.Join(t.TempDir(), "canary")
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a host service on loopback
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hostPort := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	attacks := []struct{ name, cmd string }{
		{"chroot-escape", `python3 -c "import os; os.makedirs('/x', exist_ok=True); os.chroot('/x'); os.chdir('../../../../..'); os.chroot('.'); open('` + canary + `','w').write('escaped')"`},
		{"mount", `mkdir -p /m && mount -t tmpfs t /m`},
		{"mknod", `mknod /sda b 254 0`},
		{"host-disk", `ls /dev/ | grep -qE '^(sd|vd|nvme|xvd)'`},
		{"sysctl", `echo '|/tmp/x' > /proc/sys/kernel/core_pattern`},
		{"sysrq", `echo h > /proc/sysrq-trigger`},
		{"kill-host", `kill -0 1 && test "$(cat /proc/1/comm)" != sh && test "$(cat /proc/1/comm)" != bwrap`},
		{"host-root", `grep -qE "^ *0 +0 " /proc/self/uid_map`}, // root here is host root
		{"host-loopback", `python3 -c "import socket; socket.create_connection(('127.0.0.1', ` + hostPort + `), 3)"`},
	}
	var script strings.Builder
	script.WriteString("touch /control && chown 1000:100 /control && echo control >> /results\n")
	for _, a := range attacks {
		script.WriteString("if (" + a.cmd + ") >/dev/null 2>&1; then echo " + a.name + " >> /results; fi\n")
	}
	spec, err := environment.ParseSpec([]byte("name: steps-attack\nbase: {environment: python}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	spec.Steps = []environment.Step{{Run: script.String()}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b, err := st.Build(ctx, spec, environment.BuildOptions{Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = st.Remove(b.ID) })
	got, err := os.ReadFile(filepath.Join(b.Rootfs(), "results"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Fields(string(got)); len(lines) == 0 || lines[0] != "control" {
		t.Fatalf("the control (root chown) did not run: %q", got)
	} else if len(lines) > 1 {
		t.Errorf("attacks that succeeded from a run step: %v", lines[1:])
	}
	if _, err := os.Stat(canary); err == nil {
		t.Error("the run step wrote a file on the host")
	}
}

// TestSteps builds ordered steps over "python": env, workdir, copy of an
// uploaded archive (a symlink in it pointing out stays inside the rootfs),
// a pip install from a loopback index as root and a run step as user.
func TestSteps(t *testing.T) {
	st, _ := pythonStore(t)
	dir := t.TempDir()
	wheel := testpypi.Wheel(t, "cs_steps", "1.0", "cs_steps", "VALUE = 7\n")
	index := testpypi.Serve(t, "cs-steps", testpypi.FileName("cs_steps", "1.0"), wheel)
	st.LoopbackPorts = []int{testpypi.Port(t, index)} // the jail reaches no other host port
	archive := tarGz(t, map[string]string{"app/main.py": "print('hi')\n", "app/data/x.txt": "x\n"},
		map[string]string{"app/evil": "/etc/shadow"})
	if err := os.WriteFile(filepath.Join(dir, "files.tar.gz"), archive, 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := environment.ParseSpec([]byte(`name: steps-ok
base: {environment: python}
steps:
  - env: {GREETING: hello}
  - workdir: /srv/app
  - copy: {archive: files.tar.gz, src: app, dest: ., owner: user, mode: "0640"}
  - run: pip install --index-url `+index+` cs-steps==1.0
  - user: user
  - run: echo "$GREETING $(id -u) $(pwd)" > /srv/app/whoami && python3 -c "import cs_steps; assert cs_steps.VALUE == 7"
`), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := st.Build(ctx, spec, environment.BuildOptions{Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = st.Remove(b.ID) })
	root := b.Rootfs()
	got, err := os.ReadFile(filepath.Join(root, "srv/app/whoami"))
	if err != nil || string(got) != "hello 1000 /srv/app\n" {
		t.Errorf("run step as user in workdir wrote %q, %v", got, err)
	}
	fi, err := os.Stat(filepath.Join(root, "srv/app/main.py"))
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("copied file: %v %v", fi, err)
	}
	if link, err := os.Readlink(filepath.Join(root, "srv/app/evil")); err != nil || link != "/etc/shadow" {
		t.Errorf("the symlink is kept as a link (resolved only inside the rootfs): %q %v", link, err)
	}
	if b.Env["GREETING"] != "hello" || b.Workdir != "/srv/app" || b.User != "user" {
		t.Errorf("build record: env %v workdir %q user %q", b.Env, b.Workdir, b.User)
	}
	// Same steps, same archive bytes: the cached build.
	again, err := st.Build(ctx, spec, environment.BuildOptions{})
	if err != nil || again.ID != b.ID {
		t.Errorf("rebuild: %v, id %s vs %s", err, again.ID, b.ID)
	}
}
