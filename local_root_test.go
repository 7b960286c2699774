package sandboxes_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// TestLocalWritableRootAndRoot: on the local variant the root directory
// takes new entries (mkdir /x, as on E2B), and a root caller's sandbox has a
// root user through sudo — uid 0 of the sandbox's own nested user
// namespace, which can write root's files and nothing of the host's, and
// can't reach the agent.
func TestLocalWritableRootAndRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sb := newLocal(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(cmd string) (string, int) {
		t.Helper()
		res, err := sb.Commands().Run(ctx, cmd)
		if res == nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return strings.TrimSpace(res.Stdout + res.Stderr), res.ExitCode
	}
	if out, code := run("mkdir -p /x/y && echo hi > /x/y/f && cat /x/y/f && stat -c %U /x"); out != "hi\nuser" || code != 0 {
		t.Errorf("mkdir /x: %q exit %d", out, code)
	}
	if ex := runOut(t, sb, "import os\nos.makedirs('/data', exist_ok=True)\nopen('/data/a', 'w').write('1')\nprint(open('/data/a').read())"); ex.Error != nil || ex.Stdout() != "1\n" {
		t.Errorf("python writing /data: %q %v", ex.Stdout(), ex.Error)
	}
	if out, code := run("echo x > /usr/evil"); code == 0 {
		t.Errorf("the user wrote /usr: %q", out)
	}

	sandboxestest.Require(t, os.Geteuid() == 0, "a root user in the sandbox needs a root caller (the local variant maps it to a host uid of its own)")
	for cmd, want := range map[string]string{
		"sudo id -u; sudo whoami":                                             "0\nroot",
		"sudo sh -c 'echo r > /root/f && stat -c %U:%a /root/f'":              "root:644",
		"sudo mkdir /opt2 && stat -c %U /opt2":                                "root",
		"bash -lc 'sudo id -u'":                                               "0", // a login shell's PATH
		"sudo grep -E '^Cap(Eff|Bnd)' /proc/self/status | cut -f2":            "0000000000000000\n0000000000000000",
		"sudo sh -c 'echo $HOME; pwd'; cd /tmp && sudo pwd":                   "/root\n/home/user\n/tmp",
		"sudo sh -c 'exit 3'; echo $?":                                        "3",
		"sudo -u nobody id 2>&1 | grep -c 'only root'":                        "1",
		"sudo sh -c 'echo x > /etc/evil' 2>/dev/null; echo $?":                "2",
		"sudo kill -9 1 2>/dev/null; echo $?":                                 "1",
		"sudo sh -c 'echo 1000 > /proc/1/oom_score_adj' 2>/dev/null; echo $?": "2",
		"sudo cat /proc/1/environ >/dev/null 2>&1; echo $?":                   "1",
	} {
		if out, _ := run(cmd); out != want {
			t.Errorf("%s: %q, want %q", cmd, out, want)
		}
	}
	// The agent still answers.
	if ex := runOut(t, sb, "6 * 7"); ex.Text() != "42" {
		t.Errorf("after root's attempts: %q %v", ex.Text(), ex.Error)
	}
}
