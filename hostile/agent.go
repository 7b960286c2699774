// Attacks on the agent (PID 1): killing, signalling and limiting it from inside.

package hostile

import (
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

func (c *suite) killAll(t *testing.T) {
	sb := c.create(t, nil)
	py(t, sb, "kept = 1")
	other, err := sb.CreateContext(ctxT(t, time.Minute), sandboxes.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	py(t, sb, "ctx_state = 1", sandboxes.InContext(other))
	const bomb = "import os, signal\nos.kill(-1, signal.SIGKILL)\nos.kill(1, signal.SIGKILL)\nos.kill(1, signal.SIGSTOP)\n'survived'"
	var ex *sandboxes.Execution
	if c.o.UserSpaceKernel {
		var err error
		if ex, err = sb.RunCode(ctxT(t, time.Minute), bomb); err != nil {
			record(t, "kill -9 1 from inside ended the agent, and with it only this sandbox (%s)", answersOrDead(t, sb, c.o))
			return
		}
	} else {
		ex = py(t, sb, bomb)
	}
	if ex.Text() != "survived" {
		t.Errorf("kill -9 -1: %q %v", ex.Text(), ex.Error)
	}
	alive(t, sb, "kill -9 -1, kill -9 1 and kill -STOP 1")
	ex = py(t, sb, "kept")
	st := "the caller's context kept its state"
	if ex.Text() != "1" {
		st = "the caller's context lost its state"
	}
	ex = py(t, sb, "ctx_state", sandboxes.InContext(other))
	oth := "the other context survived"
	if ex.Error != nil {
		// Its idle kernel died: the next execution must say the state was
		// lost, not just fail with a NameError.
		if !strings.Contains(ex.Stderr(), "kernel restarted") {
			t.Errorf("the other context's kernel was killed and its state lost without notice: %v, stderr %q", ex.Error, ex.Stderr())
		}
		oth = "the other context's idle kernel was killed; its next execution said so (\"kernel restarted … state … lost\")"
	}
	record(t, "agent ignores SIGKILL/SIGSTOP from inside; %s; %s", st, oth)
}

// signalAgent sends the agent (PID 1) every catchable signal from inside.
// The agent may survive or end, but must never hang, and a dead sandbox
// must be reported as such and cleaned up.
func (c *suite) signalAgent(t *testing.T) {
	sigs := []struct {
		n    int
		name string
	}{{1, "SIGHUP"}, {2, "SIGINT"}, {3, "SIGQUIT"}, {4, "SIGILL"}, {5, "SIGTRAP"}, {6, "SIGABRT"}, {7, "SIGBUS"}, {8, "SIGFPE"},
		{10, "SIGUSR1"}, {11, "SIGSEGV"}, {12, "SIGUSR2"}, {13, "SIGPIPE"}, {14, "SIGALRM"}, {15, "SIGTERM"}, {24, "SIGXCPU"}, {31, "SIGSYS"}, {20, "SIGTSTP"}, {21, "SIGTTIN"}}
	var sb *sandboxes.Sandbox
	var killers []string
	for _, s := range sigs {
		if sb == nil {
			sb = c.create(t, nil)
		}
		ex, err := sb.RunCode(ctxT(t, 30*time.Second), "import os; os.kill(1, "+strconv.Itoa(s.n)+"); import time; time.sleep(0.3); 'sent'")
		_ = ex
		_ = err
		res := answersOrDead(t, sb, c.o)
		if res != "answers" {
			killers = append(killers, s.name)
			t.Logf("%s from inside ended the sandbox: %s", s.name, res)
			_ = sb.Close()
			sb = nil
		}
	}
	if len(killers) > 0 {
		record(t, "%d signals: the agent survives all but %s, which end the sandbox (reported dead with ErrUnavailable/ErrNotFound, cleaned up); no hang", len(sigs), strings.Join(killers, ", "))
	} else {
		record(t, "%d signals: the agent survives all", len(sigs))
	}
}

// agentOutOfReach: the agent (PID 1, same uid as user code) cannot be
// limited, reniced or descheduled from inside: prlimit(RLIMIT_NOFILE 1)
// would stop it accepting connections. Every thread of the agent is tried,
// and the agent must still answer on new connections afterwards.
func (c *suite) agentOutOfReach(t *testing.T) {
	sb := c.create(t, nil)
	ex := py(t, sb, `import ctypes, errno, os, platform, resource
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {'x86_64': dict(ioprio_set=251, sched_setattr=314), 'aarch64': dict(ioprio_set=30, sched_setattr=274)}[platform.machine()]
def sc(nr, *a):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])
    if r < 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
tids = sorted(int(x) for x in os.listdir('/proc/1/task'))
attempts = []
for tid in tids:
    attempts += [('prlimit-nofile-%d' % tid, lambda tid=tid: resource.prlimit(tid, resource.RLIMIT_NOFILE, (1, 1))),
                 ('setpriority-%d' % tid, lambda tid=tid: os.setpriority(os.PRIO_PROCESS, tid, 19)),
                 ('sched-idle-%d' % tid, lambda tid=tid: os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))),
                 ('sched-setparam-%d' % tid, lambda tid=tid: os.sched_setparam(tid, os.sched_param(0))),
                 ('sched-setattr-%d' % tid, lambda tid=tid: sc(NR['sched_setattr'], tid, 0, 0)),
                 ('ioprio-%d' % tid, lambda tid=tid: sc(NR['ioprio_set'], 1, tid, 3 << 13))]
one = (ctypes.c_ulong * 2)(1, 1)
NR_PRLIMIT = {'x86_64': 302, 'aarch64': 261}[platform.machine()]
attempts += [('prlimit-pid-hi', lambda: sc(NR_PRLIMIT, (1 << 32) | 1, resource.RLIMIT_NOFILE, ctypes.addressof(one), 0)),
             ('setpriority-user', lambda: os.setpriority(os.PRIO_USER, 0, 19)),
             ('setpriority-user-1000', lambda: os.setpriority(os.PRIO_USER, 1000, 19)),
             ('setpriority-pgrp', lambda: os.setpriority(os.PRIO_PGRP, 0, 19)),
             ('setpriority-pgrp-1', lambda: os.setpriority(os.PRIO_PGRP, 1, 19)),
             ('ioprio-user', lambda: sc(NR['ioprio_set'], 3, 1000, 3 << 13)),
             ('ioprio-pgrp', lambda: sc(NR['ioprio_set'], 2, 0, 3 << 13))]
for name, fn in attempts:
    try:
        fn(); print(name, 'ALLOWED')
    except (OSError, ValueError) as e:
        print(name, 'refused', errno.errorcode.get(getattr(e, 'errno', 0) or 0, type(e).__name__))
try:
    lim = [l for l in open('/proc/1/limits') if l.startswith('Max open files')][0].split()
    print('agent-nofile', lim[3], lim[4])
except FileNotFoundError:
    print('agent-nofile', 'unknown', 'unknown')  # gVisor has no /proc/PID/limits
print('agent-nice', open('/proc/1/stat').read().rsplit(')', 1)[1].split()[16])
os.setpriority(os.PRIO_PROCESS, 0, 5)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
print('self-ok')
`)
	refused, total := 0, 0
	var nofile, nice string
	for _, l := range strings.Split(out(ex), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "agent-nofile":
			nofile = f[1]
		case len(f) == 2 && f[0] == "agent-nice":
			nice = f[1]
		case len(f) >= 2 && f[1] == "refused":
			refused++
			total++
		case len(f) >= 2 && f[1] == "ALLOWED":
			total++
			t.Errorf("user code reached the agent: %s", l)
		}
	}
	if ex.Error != nil || !strings.Contains(out(ex), "self-ok") || total < 13 {
		t.Fatalf("probe incomplete: %s %v", out(ex), ex.Error)
	}
	if nofile == "1" || nice != "0" {
		t.Errorf("the agent's limits changed: RLIMIT_NOFILE %s, nice %s", nofile, nice)
	}
	// New connections, several at once: the agent must still accept them.
	for i := 0; i < 4; i++ {
		alive(t, sb, "prlimit/setpriority/ioprio/sched attempts on the agent")
	}
	record(t, "%d/%d attempts to prlimit, renice, deschedule or ioprio the agent (each of its threads, by pid, process group and user) refused; the agent keeps RLIMIT_NOFILE %s, nice %s and answers; user code can still change its own", refused, total, nofile, nice)
}
