package sandboxes_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
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

// TestLocalNoRootUser: local.Options.NoRootUser leaves the root user out of a
// root caller's sandbox: no broker process, no sudo of ours, no root-owned
// directory of the broker's; the sandbox's user works as before. A warm
// pool of sandboxes with a root user, same shape otherwise, must not serve
// such a Create (that would hand out root where it was declined).
func TestLocalNoRootUser(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sandboxestest.Require(t, os.Geteuid() == 0, "a root user in the sandbox needs a root caller (the local variant maps it to a host uid of its own)")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt := ownRuntimeDir(t, "cs-pool-")
	t.Cleanup(func() { local.CloseWarmPools(context.Background()) })
	withRoot := sandboxes.Config{Variant: "local", Options: local.Options{RuntimeDir: rt, WarmPool: 1}}
	first, err := sandboxes.Create(ctx, withRoot) // a miss: it starts the pool
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	waitFor(t, "a pool sandbox ready", func() bool { return local.WarmPoolStats().Ready >= 1 })
	noRoot := withRoot
	noRoot.Options = local.Options{RuntimeDir: rt, WarmPool: 1, NoRootUser: true}
	hits := local.WarmPoolStats().Hits
	sb, err := sandboxes.Create(ctx, noRoot)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if got := local.WarmPoolStats().Hits - hits; got != 0 {
		t.Errorf("a NoRootUser Create was served %d time(s) from the pool of sandboxes with a root user", got)
	}
	const probe = "sudo -n id -u >/dev/null 2>&1 && echo sudo yes || echo sudo no; test -e /.code-sandboxes; echo dir $?; " +
		"for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep -c '^code-sandboxes-root'; id -u"
	for _, c := range []struct {
		name string
		sb   *sandboxes.Sandbox
		want string
	}{
		{"with a root user", first, "sudo yes\ndir 0\n1\n1000"},
		{"NoRootUser", sb, "sudo no\ndir 1\n0\n1000"},
	} {
		res, err := c.sb.Commands().Run(ctx, probe)
		if res == nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := strings.TrimSpace(res.Stdout); got != c.want {
			t.Errorf("%s: %q, want %q (stderr %q)", c.name, got, c.want, res.Stderr)
		}
	}
	if ex := runOut(t, sb, "6 * 7"); ex.Text() != "42" {
		t.Errorf("NoRootUser sandbox: %q %v", ex.Text(), ex.Error)
	}
}

// TestLocalRootBrokerHeldUntilAsked: in a local sandbox the root user's
// broker stays stopped until root is first asked for (the agent never
// releases it by itself), and code in the sandbox can't take the held
// broker over — it has no seccomp filter yet, so a way into it would be a
// way out of the filter: its memory, fds and environment can't be opened,
// and ptrace is refused. A sudo then starts it and is served.
func TestLocalRootBrokerHeldUntilAsked(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sandboxestest.Require(t, os.Geteuid() == 0, "a root user in the sandbox needs a root caller (the local variant maps it to a host uid of its own)")
	sb := newLocal(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if ex := runOut(t, sb, "1 + 1"); ex.Text() != "2" {
		t.Fatalf("first cell: %q %v", ex.Text(), ex.Error)
	}
	// The old agent released it 1 s after ready at the latest.
	time.Sleep(1500 * time.Millisecond)
	ex := runOut(t, sb, `
import ctypes, os
pid = int(open('/.code-sandboxes/broker.pid').read())
state = [l.split()[1] for l in open('/proc/%d/status' % pid) if l.startswith('State:')][0]
got = {'state': state}
for name, flags in (('mem', os.O_RDWR), ('mem', os.O_RDONLY), ('environ', os.O_RDONLY), ('fd', os.O_RDONLY | os.O_DIRECTORY)):
    try:
        os.close(os.open('/proc/%d/%s' % (pid, name), flags))
        got[name + str(flags)] = 'opened'
    except PermissionError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
    got['ptrace'] = 'attached'
print(sorted(got.items()))
`)
	if ex.Error != nil || strings.TrimSpace(ex.Stdout()) != "[('state', 'T')]" {
		t.Fatalf("the held broker, seen from the sandbox: %q %v; want it stopped and nothing of it opened", ex.Stdout(), ex.Error)
	}
	res, err := sb.Commands().Run(ctx, "sudo id -u && grep State: /proc/$(cat /.code-sandboxes/broker.pid)/status")
	if err != nil || res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "0\n") || strings.Contains(res.Stdout, "(stopped)") {
		t.Fatalf("sudo after the hold: %+v %v; want 0 and a running broker", res, err)
	}
}
