package hostile

import (
	"fmt"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// probeCase is an attack written as Python, run in the victim. The script
// prints one line per attempt: "ok <attempt> <how it was stopped>", "BAD
// <attempt> <what got through>", or "na <attempt> <why it does not apply>".
// The case fails on any BAD line, on a script error, and when no attempt
// reported ok (a probe that silently did nothing proves nothing).
type probeCase struct {
	name string
	// tries is what the attack attempts; stops is what stops it (the
	// layer: seccomp filter, no capabilities, user namespace, pid
	// namespace, non-dumpable agent, read-only mounts, the kernel's own
	// checks), for the reader of a failure and of SECURITY.md.
	tries, stops string
	code         string
	// limits: the case needs Options.Limits (the variant enforces Memory,
	// CPU and Pids).
	limits bool
	// mayEndAgent: under a user-space kernel (Options.UserSpaceKernel) the
	// attack may end the agent (gVisor doesn't shield PID 1 from its
	// namespace's signals): it runs in a sandbox of its own, which must
	// then be reported dead and cleaned up, so the cases after it still
	// have their victim.
	mayEndAgent bool
	// userSpaceKernelGap: under a user-space kernel the case is skipped with
	// this reason: a known gap, documented in SECURITY.md (Isolation gvisor).
	userSpaceKernelGap string
	// agentUIDCloses: the gap above is closed where the agent keeps what
	// it must under a uid of its own (Options.AgentOwnUID): the case runs
	// there (the probe sees AGENT_OWN_UID).
	agentUIDCloses bool
}

// probeLib is prepended to every probe: syscall numbers and reporting.
const probeLib = `import ctypes, errno, os, platform, socket, struct, fcntl, signal, subprocess, sys, time, resource, mmap
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ARCH = platform.machine()
NR = {
 'x86_64': dict(mount=165, umount2=166, unshare=272, setns=308, keyctl=250, add_key=248, ptrace=101, bpf=321, getpid=39,
                pidfd_open=434, pidfd_getfd=438, pidfd_send_signal=424, tgkill=234, adjtimex=159, clock_adjtime=305,
                sched_setattr=314, ioprio_set=251, mlockall=151, memfd_create=319, fsetxattr=190, setxattr=188,
                personality=135, ioctl=16, open_tree=428, userfaultfd=323, perf_event_open=298, init_module=175),
 'aarch64': dict(mount=40, umount2=39, unshare=97, setns=268, keyctl=219, add_key=217, ptrace=117, bpf=280, getpid=172,
                 pidfd_open=434, pidfd_getfd=438, pidfd_send_signal=424, tgkill=131, adjtimex=171, clock_adjtime=266,
                 sched_setattr=274, ioprio_set=30, mlockall=230, memfd_create=279, fsetxattr=7, setxattr=5,
                 personality=92, ioctl=29, open_tree=428, userfaultfd=282, perf_event_open=241, init_module=105),
}[ARCH]
def en(e):
    return errno.errorcode.get(e, str(e))
def ok(what, detail=''):
    print('ok', what, detail, flush=True)
def bad(what, detail=''):
    print('BAD', what, detail, flush=True)
def na(what, detail=''):
    print('na', what, detail, flush=True)
def sysc(nr, *a):
    args = [ctypes.c_long(x) if isinstance(x, int) else x for x in a]
    r = libc.syscall(ctypes.c_long(nr), *args)
    return r, (ctypes.get_errno() if r < 0 else 0)
def refused_sys(what, nr, *a, want=None):
    r, e = sysc(nr, *a)
    if r >= 0:
        bad(what, 'ALLOWED returned %d' % r)
    elif want is not None and e not in want:
        bad(what, 'failed with %s, not %s' % (en(e), '/'.join(en(w) for w in want)))
    else:
        ok(what, 'refused ' + en(e))
def refused(what, fn, want=None):
    try:
        r = fn()
    except ValueError as e:
        # Python's own refusal (raising a hard rlimit: EPERM underneath).
        ok(what, 'refused (%s)' % e); return
    except OSError as e:
        if want is not None and e.errno not in want:
            bad(what, 'failed with %s, not %s' % (en(e.errno), '/'.join(en(w) for w in want)))
        else:
            ok(what, 'refused ' + en(e.errno))
        return
    bad(what, 'ALLOWED %r' % (r,))
def sentry_own(what, fn, why):
    # Under a user-space kernel: what the Sentry emulates for the sandbox
    # alone (its own devices, its own nice values) is reported, not failed.
    try:
        r = fn()
    except OSError as e:
        ok(what, 'refused ' + en(e.errno)); return
    na(what, 'ALLOWED %r: %s' % (r, why))
def absent_or_refused(what, fn):
    try:
        r = fn()
    except FileNotFoundError:
        ok(what, 'absent'); return
    except OSError as e:
        ok(what, 'refused ' + en(e.errno)); return
    bad(what, 'ALLOWED %r' % (r,)[:200])
`

// runProbe runs p in the victim and checks its report.
func (c *suite) runProbe(t *testing.T, p probeCase) {
	t.Helper()
	if p.limits && !c.o.Limits {
		t.Skip("the variant does not enforce Config's limits")
	}
	if c.o.UserSpaceKernel && p.userSpaceKernelGap != "" && !(p.agentUIDCloses && c.o.AgentOwnUID) {
		t.Skip("known gap under a user-space kernel (SECURITY.md, Isolation gvisor): " + p.userSpaceKernelGap)
	}
	// USER_SPACE_KERNEL tells a probe that the Sentry, not the host's
	// kernel, answers (Options.UserSpaceKernel); AGENT_OWN_UID that the
	// agent has a uid of its own (Options.AgentOwnUID).
	pyBool := map[bool]string{true: "True", false: "False"}
	code := probeLib + fmt.Sprintf("USER_SPACE_KERNEL = %s\nAGENT_OWN_UID = %s\n", pyBool[c.o.UserSpaceKernel], pyBool[c.o.AgentOwnUID]) + p.code
	sb := c.victim
	if c.o.UserSpaceKernel && p.mayEndAgent {
		sb = c.create(t, nil)
		ex, err := sb.RunCode(ctxT(t, 2*time.Minute), code, sandboxes.WithTimeout(2*time.Minute))
		if err != nil {
			record(t, "the attack ended the agent, and with it only its own sandbox (%s)", answersOrDead(t, sb, c.o))
			return
		}
		c.checkProbe(t, p, sb, ex, true)
		return
	}
	c.checkProbe(t, p, sb, py(t, sb, code, sandboxes.WithTimeout(2*time.Minute)), false)
}

// checkProbe checks the report of probe p, run in sb; endable: sb is the
// probe's own and may have been ended by it (see mayEndAgent).
func (c *suite) checkProbe(t *testing.T, p probeCase, sb *sandboxes.Sandbox, ex *sandboxes.Execution, endable bool) {
	t.Helper()
	var oks, nas []string
	for _, l := range strings.Split(out(ex), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "ok":
			oks = append(oks, f[1])
		case "na":
			nas = append(nas, strings.Join(f[1:], " "))
		case "BAD":
			t.Errorf("%s got through (%s; what should stop it: %s): %s", p.name, p.tries, p.stops, l)
		}
	}
	if ex.Error != nil {
		t.Errorf("probe script failed: %s: %s\n%s", ex.Error.Name, ex.Error.Value, ex.Error.Traceback)
	}
	if len(oks) == 0 {
		t.Errorf("no attempt reported (stdout %q, stderr %q)", ex.Stdout(), ex.Stderr())
	}
	s := fmt.Sprintf("%d attempts stopped (%s)", len(oks), p.stops)
	if endable {
		s += "; then its own sandbox " + answersOrDead(t, sb, c.o)
	} else {
		alive(t, sb, p.name)
	}
	if len(nas) > 0 {
		s += fmt.Sprintf("; %d not applicable here: %s", len(nas), strings.Join(nas, "; "))
	}
	record(t, "%s", s)
}

// probeCases are the kernel-interface and /proc attacks of the hostile
// suite beyond Escalation's syscall list: other paths to the same
// objects (x32 ABI, task directories, pidfds, SIGIO), host-wide settings
// the classic container escapes write, devices, and what a shared uid or
// a shared kernel would let through.
var probeCases = []probeCase{
	probeX32ABI,
	probeAgentThroughTaskDirs,
	probePidfdAtAgent,
	probeSigioAtAgent,
	probeMknod,
	probeDeviceNodes,
	probeNetworkConfiguration,
	probeRealtimeScheduling,
	probeLockedMemory,
	probeNullPageMapping,
	probeFileCapabilities,
	probeTerminalInjection,
	probeKernelInformation,
	probeKernelHelperPaths,
	probeCgroupEscape,
	probeHostControlSockets,
	probeClusterAPI,
	probeKeyringInformation,
	probeInheritedDescriptors,
	probeAgentPortHijack,
	probePidProbing,
	probeNetworkNamespaceViews,
	probeTimeNamespace,
	probeCoreDumps,
	probeAgentBinary,
	probeReopenThroughProcFd,
	probeHardlinks,
	probeProcRootWrites,
	probeSystemFileMetadata,
	probeSetuidPlanted,
}

// bigArgvCode: arguments and environments past the kernel's limits for a
// new program: the exec must fail cleanly (E2BIG), the sandbox stay whole.
const bigArgvCode = `
for name, argv, env in (('argv-10MB', ['/bin/true'] + ['x' * 100000] * 100, {}), ('one-arg-200KB', ['/bin/true', 'x' * 200000], {}),
                        ('env-13MB', ['/bin/true'], {'V%d' % i: 'x' * 65536 for i in range(200)}), ('argv-800k-args', ['/bin/true'] + ['x'] * 800000, {})):
    try:
        subprocess.run(argv, env=env, timeout=30)
        if USER_SPACE_KERNEL and name == 'argv-800k-args':
            # The Sentry's exec counts bytes (under its limit: 1.6 MB here),
            # not Linux's per-argument pages: bounded by the sandbox's memory.
            na(name, "exec accepted by the Sentry (its own limits, within the sandbox's memory)")
        else:
            bad(name, 'exec accepted')
    except OSError as e:
        ok(name, 'refused ' + en(e.errno))
`
