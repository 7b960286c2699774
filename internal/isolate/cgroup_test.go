//go:build linux

package isolate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// This machine runs cgroup v1, so the v2 code is exercised on a fake cgroup
// tree (plain files): limits, controller enabling and event parsing.
func TestCgroupV2FakeTree(t *testing.T) {
	root := t.TempDir()
	own := filepath.Join(root, "user.slice")
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"cgroup.procs":           "",
		"cgroup.controllers":     "cpuset cpu io memory pids",
		"cgroup.subtree_control": "memory",
	} {
		os.WriteFile(filepath.Join(own, name), []byte(content), 0o644)
	}
	cg, err := newCgroupV2("abc", limits{memory: 64 << 20, cpus: 1.5, pids: 10}, own, root)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(own, "code-sandbox-abc")
	want := map[string]string{"memory.max": "67108864", "cpu.max": "150000 100000", "pids.max": "10"}
	for f, v := range want {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || string(b) != v {
			t.Errorf("%s = %q (%v), want %q", f, b, err, v)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(own, "cgroup.subtree_control")); !strings.Contains(string(b), "+cpu +pids") {
		t.Errorf("subtree_control = %q", b)
	}
	os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "pids.events"), []byte("max 0\n"), 0o644)
	if oom, pids := cg.events(); !oom || pids {
		t.Errorf("events: oom=%v pids=%v", oom, pids)
	}

	// A cgroup missing a controller must fail when that limit is requested.
	os.WriteFile(filepath.Join(own, "cgroup.controllers"), []byte("memory"), 0o644)
	if _, err := newCgroupV2("def", limits{pids: 10}, own, own); err == nil || !strings.Contains(err.Error(), "pids") {
		t.Errorf("missing pids controller: %v", err)
	}
}

func TestCgroupV1Events(t *testing.T) {
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), 0o644)
	os.WriteFile(filepath.Join(d, "pids.events"), []byte("max 5\n"), 0o644)
	cg := &cgroup{dirs: []string{d}, ctrl: map[string]string{"memory": d, "pids": d}}
	if oom, pids := cg.events(); !oom || !pids {
		t.Errorf("events: oom=%v pids=%v", oom, pids)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/a\040b\011c`); got != "/a b\tc" {
		t.Errorf("got %q", got)
	}
}

// TestCgroupV1CPUOnlyWhenUseful: on v1 the sandbox gets a cpu cgroup only
// with a CPU limit or when cpuacct shares the hierarchy (Usage reads its
// CPU time there); otherwise it would only cost the start a move (fake
// tree: plain directories).
func TestCgroupV1CPUOnlyWhenUseful(t *testing.T) {
	for _, c := range []struct {
		l       limits
		cpuAcct bool
		want    bool
	}{{limits{memory: 1 << 30, pids: 10}, false, false}, {limits{memory: 1 << 30, cpus: 1}, false, true}, {limits{pids: 10}, true, true}} {
		root := t.TempDir()
		own := map[string]string{}
		for _, ctl := range []string{"memory", "cpu", "pids"} {
			own[ctl] = filepath.Join(root, ctl)
			if err := os.Mkdir(own[ctl], 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cg, err := newCgroupV1("abc", c.l, own, c.cpuAcct)
		if err != nil {
			t.Fatal(err)
		}
		_, got := cg.ctrl["cpu"]
		_, statErr := os.Stat(filepath.Join(own["cpu"], cgroupGroupName, "abc"))
		if got != c.want || (statErr == nil) != c.want {
			t.Errorf("%+v cpuacct %v: cpu cgroup %v (dir: %v), want %v", c.l, c.cpuAcct, got, statErr, c.want)
		}
		if _, ok := cg.ctrl["memory"]; !ok {
			t.Errorf("%+v: no memory cgroup", c.l)
		}
	}
}
