package testdep

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRequireFailsInCI: a missing dependency skips, and fails under
// CI=true. The child runs TestChildMissing, which only does Require.
func TestRequireFailsInCI(t *testing.T) {
	for _, c := range []struct {
		ci   string
		want string
	}{{"", "--- SKIP: TestChildMissing"}, {"true", "--- FAIL: TestChildMissing"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildMissing$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTDEP_CHILD=1", "CI="+c.ci)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), c.want) {
			t.Errorf("CI=%q: want %q in\n%s", c.ci, c.want, out)
		}
	}
}

func TestChildMissing(t *testing.T) {
	if os.Getenv("TESTDEP_CHILD") != "1" {
		t.Skip("run by TestRequireFailsInCI")
	}
	Require(t, false, "a dependency this test pretends is missing")
}
