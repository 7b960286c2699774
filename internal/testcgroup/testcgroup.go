//go:build linux

// Package testcgroup makes cgroups for tests that need a limit of their
// own around a child process (root only).
package testcgroup

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

var seq atomic.Int64

// New makes a cgroup with controller ("pids" or "memory": v1's hierarchy
// of it, else v2 with it enabled at its root) and returns its directory:
// the test sets a limit and moves a child in. When the test ends it waits
// up to 15 s for the processes in it to end (one still there fails the
// test: a leak) and removes it.
func New(t testing.TB, controller string) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var v1, v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) {
			continue
		}
		switch fields[sep+1] {
		case "cgroup":
			if v1 == "" && strings.Contains(","+fields[sep+3]+",", ","+controller+",") {
				v1 = fields[4]
			}
		case "cgroup2":
			if b, _ := os.ReadFile(filepath.Join(fields[4], "cgroup.controllers")); v2 == "" && strings.Contains(string(b), controller) {
				v2 = fields[4]
			}
		}
	}
	base := v1
	if base == "" {
		testdep.Require(t, v2 != "", "a "+controller+" cgroup controller (v1 or v2)")
		base = v2
		// Sandboxes' default limits need memory (and cpu for CPUs) in
		// their creator's cgroup too, or they go elsewhere.
		for _, c := range []string{"+pids", "+memory", "+cpu"} {
			err := os.WriteFile(filepath.Join(v2, "cgroup.subtree_control"), []byte(c), 0o644)
			testdep.Require(t, err == nil, "a cgroup v2 root that can enable "+c[1:]+" for its children: "+fmt.Sprint(err))
		}
	}
	dir := filepath.Join(base, "cs-test-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(seq.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The sandboxes' own cgroups (v1: beneath code-sandboxes/) are
		// gone once they closed. The child's spare supervisor (started
		// ahead for its next Create) ends on its own once the child is
		// gone: wait for it, a process that stays is a leak.
		deadline := time.Now().Add(15 * time.Second)
		for {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if len(strings.TrimSpace(string(b))) == 0 {
				break
			}
			if time.Now().After(deadline) {
				for _, pid := range strings.Fields(string(b)) {
					cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
					t.Errorf("left running in the test's cgroup: %s %q", pid, cmdline)
				}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = os.Remove(filepath.Join(dir, "code-sandboxes"))
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove the test's cgroup: %v", err)
		}
	})
	return dir
}
