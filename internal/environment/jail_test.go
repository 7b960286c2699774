//go:build linux

package environment

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// miniRootfs is a rootfs of a few host binaries and the libraries they
// load (found with ldd): enough for attack steps, built in milliseconds.
func miniRootfs(t *testing.T, bins ...string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	copyIn := func(src string) {
		dst := filepath.Join(root, src)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, raw, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, b := range append([]string{"sh"}, bins...) {
		p, err := exec.LookPath(b)
		if err != nil {
			t.Fatal(err)
		}
		p, _ = filepath.EvalSymlinks(p)
		copyIn(p)
		if b == "sh" && p != "/bin/sh" {
			_ = os.MkdirAll(filepath.Join(root, "bin"), 0o755)
			copyIn(p)
			raw, _ := os.ReadFile(p)
			_ = os.WriteFile(filepath.Join(root, "bin/sh"), raw, 0o755)
		}
		out, _ := exec.Command("ldd", p).Output()
		for _, l := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(l) {
				if strings.HasPrefix(f, "/") && !seen[f] {
					seen[f] = true
					copyIn(f)
				}
			}
		}
	}
	for _, d := range []string{"proc", "dev", "etc", "tmp", "root"} {
		_ = os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	_ = os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:100:user:/home/user:/bin/sh\n"), 0o644)
	return root
}

func jailBuilder(t *testing.T, rootfs string) (*builder, *bytes.Buffer) {
	t.Helper()
	testdep.Require(t, os.Geteuid() == 0, "build jails need root")
	work := filepath.Dir(rootfs)
	var log bytes.Buffer
	b := &builder{spec: &Spec{Name: "jail"}, in: &inputs{}, work: work, rootfs: rootfs, p: newProgress(nil),
		storeDir: walkableTempDir(t), logw: &log}
	if err := os.MkdirAll(filepath.Join(b.storeDir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.jail.close() })
	return b, &log
}

// walkableTempDir is a temporary directory that others may walk through
// (t.TempDir's are 0700), as a store's must be for the jail.
func walkableTempDir(t *testing.T) string {
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		_ = os.Chmod(p, 0o755)
	}
	return d
}

// procsInRange lists the host's processes running as a host uid of the
// jail's range, but for skip (the namespace holder).
func procsInRange(t *testing.T, base, skip int) []string {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == skip {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		if strings.Contains(string(raw), "State:\tZ") {
			// A zombie is no process: it waits for the host's init
			// (or whoever it was reparented to) to reap it.
			continue
		}
		for _, l := range strings.Split(string(raw), "\n") {
			f := strings.Fields(l)
			if len(f) >= 3 && f[0] == "Uid:" {
				for _, u := range f[1:] {
					if n, err := strconv.Atoi(u); err == nil && n >= base && n < base+idRangeSize {
						out = append(out, e.Name()+": "+strings.Join(strings.Fields(string(raw)), " ")[:200])
						break
					}
				}
			}
		}
	}
	return out
}

// TestJailAttacks: a build step is the template author's code running as
// root of the image. Each attack below must fail, and a control proves the
// step ran as root there (it may chown, which dpkg needs). The host side
// checks what a step can't see itself: no file appeared on the host, no
// process of the step's range outlived it, what root in the step is on the
// host.
func TestJailAttacks(t *testing.T) {
	root := miniRootfs(t, "cat", "mknod", "mount", "chroot", "sleep", "bash", "chown", "touch", "grep", "unshare", "id", "ls", "nohup", "setsid")
	hostDir := walkableTempDir(t)
	canary := filepath.Join(hostDir, "canary")
	secret := filepath.Join(hostDir, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The image's /srv is a symlink to a host directory: the step's writes
	// through it must stay in the rootfs.
	if err := os.Symlink(hostDir, filepath.Join(root, "srv")); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("host loopback\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	attacks := []struct{ name, cmd string }{
		{"proc-1-root", "echo x > /proc/1/root" + canary},
		{"symlink-out", "echo x > /srv/canary && test -e /proc/1/root" + canary},
		// The step's own views of the root: its jail's, never the host's.
		{"proc-self-root", "echo x > /proc/self/root" + canary + " || echo x > /proc/self/root/srv/canary && test -e /proc/1/root" + canary},
		{"proc-thread-self-root", "echo x > /proc/thread-self/root" + canary + " || (cd /proc/self/root/../../.. && echo x > ." + canary + ")"},
		{"proc-self-cwd", "cd / && echo x > /proc/self/cwd/../.." + canary},
		{"read-host-proc-self-root", "cat /proc/self/root" + secret + " || cat /proc/thread-self/root/../.." + secret},
		{"read-host", "cat " + secret + " || cat /proc/1/root" + secret},
		{"mknod", "mknod /dev/sdz b 8 0 || mknod /sdz b 8 0"},
		{"mount", "mount -t tmpfs t /tmp"},
		{"chroot", "chroot / /bin/sh -c true"},
		{"host-loopback", "exec 3<>/dev/tcp/127.0.0.1/" + strconv.Itoa(port) + " && cat <&3 | grep -q host"},
		{"host-dev", "ls /dev | grep -qE '^(sd|vd|nvme|xvd|mem|kmsg)'"},
		{"sysrq", "echo h > /proc/sysrq-trigger"},
		{"sysctl", "echo '|/tmp/x' > /proc/sys/kernel/core_pattern"},
		{"nested-userns", "unshare -U -r id"},
	}
	var script strings.Builder
	script.WriteString("set +e\ntouch /control && chown 1000:100 /control && echo control >> /results\n")
	script.WriteString("cat /proc/self/uid_map > /uidmap\n")
	for _, a := range attacks {
		script.WriteString("if (" + a.cmd + ") >/dev/null 2>&1; then echo " + a.name + " >> /results; fi\n")
	}
	// Processes that try to outlive the step.
	script.WriteString("setsid sleep 1000 >/dev/null 2>&1 & nohup sleep 1000 >/dev/null 2>&1 &\n(sleep 1000 &) ; true\n")
	b, log := jailBuilder(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.inJail(ctx, 0, 0, "/", []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}, []string{"bash", "-c", script.String()}); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	got, _ := os.ReadFile(filepath.Join(root, "results"))
	if lines := strings.Fields(string(got)); len(lines) == 0 || lines[0] != "control" {
		t.Fatalf("the control (root chown) did not run: %q\n%s", got, log)
	} else if len(lines) > 1 {
		t.Errorf("attacks that succeeded from a build step: %v", lines[1:])
	}
	if ents, _ := os.ReadDir(hostDir); len(ents) != 1 {
		t.Errorf("the step wrote into the host directory: %v", ents)
	}
	// root in the step is the range's first id on the host, and what it
	// made is owned by the image's root on disk (the idmapped mount).
	m, _ := os.ReadFile(filepath.Join(root, "uidmap"))
	if f := strings.Fields(string(m)); len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(b.jail.hostID) || f[2] != "65536" || b.jail.hostID < idRangeBase {
		t.Errorf("uid map in the step: %q (range %d)", m, b.jail.hostID)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "control"), &st); err != nil || st.Uid != 1000 || st.Gid != 100 {
		t.Errorf("a file the step chowned to 1000:100 is on disk as %d:%d (%v)", st.Uid, st.Gid, err)
	}
	if err := unix.Stat(filepath.Join(root, "results"), &st); err != nil || st.Uid != 0 {
		t.Errorf("a file root made in the step is on disk as uid %d (%v)", st.Uid, err)
	}
	if left := procsInRange(t, b.jail.hostID, b.jail.holder.Process.Pid); len(left) > 0 {
		t.Errorf("processes of the step outlived it: %v", left)
	}
	base := b.jail.hostID
	b.jail.close()
	if left := procsInRange(t, base, 0); len(left) > 0 {
		t.Errorf("processes of the jail outlived it: %v", left)
	}
	if mountsBelow(filepath.Join(b.storeDir, "tmp")) != nil {
		t.Errorf("mounts left: %v", mountsBelow(b.storeDir))
	}
}

// TestJailLoopbackPort: a port the store forwards is the only part of the
// host's loopback a step reaches (a package index on the build machine).
func TestJailLoopbackPort(t *testing.T) {
	root := miniRootfs(t, "cat", "bash", "setpriv")
	if err := os.Chmod(root, 0o1777); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("index\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	b, log := jailBuilder(t, root)
	b.loopback = []int{port}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := "exec 3<>/dev/tcp/127.0.0.1/" + strconv.Itoa(port) + " && cat <&3 > /got && cat /proc/self/status > /status && ulimit -u > /nproc"
	if err := b.inJail(ctx, 1000, 100, "/", []string{"PATH=/usr/bin:/bin"}, []string{"bash", "-c", cmd}); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "got")); string(got) != "index\n" {
		t.Errorf("through the forwarded port: %q", got)
	}
	// A fork bomb stops at the step's process limit.
	if got, _ := os.ReadFile(filepath.Join(root, "nproc")); strings.TrimSpace(string(got)) != strconv.Itoa(stepProcs) {
		t.Errorf("the step's process limit: %q, want %d", got, stepProcs)
	}
	// The step ran as the user asked, with no capability left.
	st, _ := os.ReadFile(filepath.Join(root, "status"))
	for _, want := range []string{"Uid:\t1000\t1000\t1000\t1000", "Gid:\t100\t100\t100\t100", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000"} {
		if !strings.Contains(string(st), want) {
			t.Errorf("the step's status lacks %q:\n%s", want, st)
		}
	}
}

// TestJailFailureLeavesNothing: a jail whose setup fails after it mounted
// the rootfs and started its namespace holder (here: a loopback port that
// is no port) takes all of it down again, and its range is free.
func TestJailFailureLeavesNothing(t *testing.T) {
	root := miniRootfs(t)
	b, _ := jailBuilder(t, root)
	b.loopback = []int{-1}
	err := b.inJail(context.Background(), 0, 0, "/", nil, []string{"true"})
	if err == nil || !strings.Contains(err.Error(), "loopback port -1") {
		t.Fatalf("got %v", err)
	}
	if m := mountsBelow(b.storeDir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	// The holder was the only process of the range it had.
	for slot := 0; slot < 4; slot++ {
		if left := procsInRange(t, idRangeBase+slot*idRangeSize, 0); len(left) > 0 {
			t.Errorf("processes left in range %d: %v", slot, left)
		}
	}
}
