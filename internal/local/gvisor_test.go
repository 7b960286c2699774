package local

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
)

// The OCI spec a gVisor sandbox gets: nothing to gain through exec, the
// root and every entry bound from the host read-only, the agent's run
// directory the only writable bind, limits with gVisor's own tasks added
// to pids.
func TestGVisorSpec(t *testing.T) {
	base := t.TempDir()
	rootfs, run, etc := filepath.Join(base, "rootfs"), filepath.Join(base, "run"), filepath.Join(base, "etc")
	for _, d := range []string{rootfs, run, etc} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	spec := shimSpec{Dir: base, Exe: "/proc/self/exe",
		Record: record{ID: "lx", Network: "all", Memory: 256 << 20, CPUs: 0.5, Pids: 64}}
	s, err := gvisorSpec(spec, rootfs, run, etc, "")
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == homeseed.Dir }) {
		t.Errorf("a home seed mounted without a seed: %+v", s.Mounts)
	}
	p := s.Process
	if p.User.UID != 0 || !p.NoNewPrivileges || p.Capabilities == nil || len(p.Capabilities.Bounding) != 0 ||
		len(p.Capabilities.Inheritable) != 0 || len(p.Capabilities.Ambient) != 0 ||
		!slices.Equal(p.Capabilities.Permitted, []string{"CAP_SETUID", "CAP_SETGID"}) {
		t.Errorf("process: %+v caps %+v", p, p.Capabilities)
	}
	if !s.Root.Readonly {
		t.Error("root not read-only")
	}
	writable := 0
	for _, m := range s.Mounts {
		if m.Type != "bind" {
			continue
		}
		if slices.Contains(m.Options, "rw") {
			writable++
			if m.Destination != runInGVisor || m.Source != run {
				t.Errorf("writable bind %s <- %s", m.Destination, m.Source)
			}
			continue
		}
		if !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "nosuid") {
			t.Errorf("bind %s <- %s: options %v, want ro,nosuid", m.Destination, m.Source, m.Options)
		}
		if strings.HasPrefix(m.Destination, "/home") || m.Destination == "/tmp" || m.Destination == "/run" {
			t.Errorf("host directory %s bound in", m.Destination)
		}
	}
	if writable != 1 {
		t.Errorf("%d writable binds, want the run directory alone", writable)
	}
	r := s.Linux.Resources
	if r.Memory == nil || *r.Memory.Limit != 256<<20 || r.CPU == nil || *r.CPU.Quota != 50000 || r.Pids == nil || r.Pids.Limit != 64+gvisorPidsOverhead {
		t.Errorf("resources: %+v", r)
	}
	var resolv bool
	for _, m := range s.Mounts {
		resolv = resolv || m.Destination == "/etc/resolv.conf"
	}
	if _, err := os.Stat("/etc/resolv.conf"); err == nil && !resolv {
		t.Error("network all without the stack's resolver in /etc/resolv.conf")
	}
}

// destroy returns only once the Sentry is gone: when runsc delete leaves it
// running (here: a "runsc" that does nothing), destroy kills it itself; a
// process that merely reuses the pid (another start time) is left alone.
func TestGVisorDestroyWaitsForSentry(t *testing.T) {
	defer func(a, b time.Duration) { sentryDeleteWait, sentryKillWait = a, b }(sentryDeleteWait, sentryKillWait)
	sentryDeleteWait, sentryKillWait = 200*time.Millisecond, 5*time.Second
	spawn := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	running := func(pid int) bool {
		st, ok := procstat.Read(pid)
		return ok && st.State != 'Z'
	}

	sentry := spawn()
	g := &gvisorSandbox{runsc: "/bin/true", id: "cs-test", pid: sentry.Process.Pid, start: procStart(sentry.Process.Pid)}
	g.destroy()
	if running(sentry.Process.Pid) {
		t.Fatal("destroy returned with the sandbox process still running")
	}

	other := spawn()
	g = &gvisorSandbox{runsc: "/bin/true", id: "cs-test", pid: other.Process.Pid, start: procStart(other.Process.Pid) + 1}
	g.destroy()
	if !running(other.Process.Pid) {
		t.Fatal("destroy killed a process that only has the sandbox's pid")
	}
}

// The sweep waits for (and may kill) a dead supervisor's Sentry by the pid
// in its record: only a runsc-sandbox booted on that sandbox's own state
// directory counts, never another sandbox's that got the pid since.
func TestIsSentryOf(t *testing.T) {
	fake := func(args ...string) int {
		// A shell waiting in its read builtin (no child to leave behind),
		// with the argv of runsc's sandbox.
		cmd := exec.Command("/bin/sh", append([]string{"-c", "read x"}, args...)...)
		cmd.Args[0] = "runsc-sandbox"
		if _, err := cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd.Process.Pid
	}
	mine, other := "/run/cs/a/gvisor/state", "/run/cs/b/gvisor/state"
	pid := fake("--root="+mine, "boot")
	deadline := time.Now().Add(10 * time.Second)
	for !isSentryOf(pid, mine) {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			t.Fatalf("a runsc-sandbox on %s (cmdline %q) is not taken for that sandbox's Sentry", mine, b)
		}
		time.Sleep(10 * time.Millisecond) // until exec has replaced the forked child's cmdline
	}
	if isSentryOf(pid, other) {
		t.Error("another sandbox's Sentry is taken for this one's")
	}
	if isSentryOf(os.Getpid(), mine) || isSentryOf(0, mine) || isSentryOf(-1, mine) {
		t.Error("a process that is no Sentry is taken for one")
	}
}
