//go:build linux

package isolate

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// started holds the ids of the sandboxes this test binary started: other
// packages' tests run in parallel and have live sandboxes of their own under
// the same parent cgroup.
var started sync.Map

// Runs last (this file sorts after the other test files, and Go runs tests
// in file order): no cgroup of a sandbox started here may be left.
func TestZZNoLeftoverCgroups(t *testing.T) {
	fsys, err := detectCgroups()
	if err != nil {
		testdep.Require(t, false, "cgroups: "+err.Error())
	}
	n := 0
	started.Range(func(k, _ any) bool {
		id := k.(string)
		n++
		for ctl, dir := range fsys.v1 {
			if _, err := os.Stat(filepath.Join(dir, cgroupGroupName, id)); err == nil {
				t.Errorf("%s: cgroup of sandbox %s left behind", ctl, id)
			}
		}
		if fsys.v2 != "" {
			matches, _ := filepath.Glob(filepath.Join(fsys.v2, "*", "code-sandbox-"+id))
			m2, _ := filepath.Glob(filepath.Join(fsys.v2, "code-sandbox*", "*"+id))
			for _, m := range append(matches, m2...) {
				t.Errorf("left behind: %s", m)
			}
		}
		return true
	})
	if n == 0 {
		t.Error("no sandbox was recorded: the bookkeeping is broken")
	}
}
