package local

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
	s, err := gvisorSpec(spec, rootfs, run, etc)
	if err != nil {
		t.Fatal(err)
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
