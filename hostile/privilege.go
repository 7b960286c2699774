// Privilege escalation from inside: capabilities, setuid binaries, writes to /proc/sys.

package hostile

import (
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

func (c *suite) escalation(t *testing.T) {
	ex := py(t, c.victim, probes, sandboxes.WithTimeout(2*time.Minute))
	if ex.Error != nil {
		t.Fatalf("probe script failed: %v\n%s", ex.Error.Traceback, ex.Stdout())
	}
	refused, total := 0, 0
	for _, l := range strings.Split(out(ex), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch {
		case f[0] == "caps":
			// Five sets; four where the kernel has no ambient set (gVisor).
			if n := strings.Count(l, "'"); n < 8 || strings.Count(l, "0000000000000000") != n/2 {
				t.Errorf("capabilities left: %s", l)
			}
		case f[0] == "nnp":
			if !strings.Contains(l, "['1'] seccomp ['2']") {
				t.Errorf("no_new_privs/seccomp missing: %s", l)
			}
		case f[0] == "nice-5" && f[1] == "ALLOWED" && c.o.UserSpaceKernel:
			// The Sentry's own scheduler priority: nothing on the host.
			refused++
			total++
		case f[0] == "write-agent-mem" && f[1] == "ALLOWED":
			total++
			t.Errorf("BUG: user code can write the agent's memory through /proc/1/mem (the agent, PID 1, is dumpable and runs as the same uid): %s", l)
		case f[1] == "refused" || f[1] == "opened":
			refused++
			total++
		default:
			total++
			t.Errorf("escalation not stopped: %s", l)
		}
	}
	record(t, "%d/%d escalation attempts refused (ptrace/process_vm of the agent, unshare, setns, mount API, chroot, keyrings, bpf, perf, userfaultfd, io_uring, modules, kexec, reboot, syslog, clocks, raw/packet sockets, setuid, int 0x80); caps empty, no_new_privs, seccomp mode 2", refused, total)
	alive(t, c.victim, "the escalation probes")
}

func (c *suite) setuidBinaries(t *testing.T) {
	ex := py(t, c.victim, `import os, subprocess, stat
found = []
for d in ('/usr/bin', '/usr/sbin', '/bin', '/sbin', '/usr/lib', '/usr/libexec'):
    for root, dirs, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            try:
                if os.lstat(p).st_mode & (stat.S_ISUID | stat.S_ISGID) and not os.path.islink(p):
                    found.append(p)
            except OSError:
                pass
print('setuid', len(found))
gained = []
for cmd in (['su', '-c', 'id -u', 'root'], ['su', '-c', 'id -u'], ['newgrp', 'root']):
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=10, input=b'\n')
        if r.stdout.strip() == b'0':
            gained.append(' '.join(cmd))
    except Exception:
        pass
print('gained', gained or 'none')
print('uid', os.getuid(), os.geteuid())
`, sandboxes.WithTimeout(3*time.Minute))
	s := out(ex)
	if !strings.Contains(s, "gained none") || !strings.Contains(s, "uid 1000 1000") {
		t.Fatalf("a setuid binary gave privileges: %s %v", s, ex.Error)
	}
	record(t, "%s; none gained privileges (nosuid mounts, no_new_privs)", strings.Split(s, "\n")[0])
}

func (c *suite) writeProcSys(t *testing.T) {
	ex := py(t, c.victim, `targets = {'/proc/sys/kernel/hostname': 'evil', '/proc/sys/vm/drop_caches': '3', '/proc/sys/kernel/core_pattern': '|/tmp/x',
 '/proc/sysrq-trigger': 'h', '/proc/sys/net/ipv4/ip_forward': '1', '/sys/kernel/mm/transparent_hugepage/enabled': 'never',
 '/sys/fs/cgroup/cgroup.procs': '1', '/sys/fs/cgroup/memory/memory.limit_in_bytes': '-1', '/sys/fs/cgroup/pids/pids.max': 'max',
 '/sys/fs/cgroup/memory.max': 'max', '/sys/fs/cgroup/pids.max': 'max', '/proc/1/oom_score_adj': '-1000', '/proc/self/oom_score_adj': '-1000',
 '/proc/self/setgroups': 'allow', '/proc/self/uid_map': '0 0 1'}
for p, v in targets.items():
    try:
        with open(p, 'w') as f:
            f.write(v)
        print(p, 'WROTE')
    except OSError as e:
        print(p, 'refused', type(e).__name__)
`)
	refused := 0
	for _, l := range strings.Split(out(ex), "\n") {
		if strings.HasSuffix(strings.Fields(l + " x")[1], "WROTE") && c.o.UserSpaceKernel && strings.HasPrefix(l, "/proc/self/oom_score_adj") {
			refused++ // the Sentry's own score: the host's OOM killer sees the Sentry's
		} else if strings.HasSuffix(strings.Fields(l + " x")[1], "WROTE") {
			t.Errorf("wrote a kernel or cgroup setting: %s", l)
		} else if strings.Contains(l, "refused") {
			refused++
		}
	}
	record(t, "%d/15 writes to /proc/sys, sysrq, /sys, cgroup limits, oom_score_adj (lowering), uid_map refused", refused)
}
