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
	{
		name:  "X32ABI",
		tries: "the refused syscalls (unshare, mount, keyctl, ptrace, bpf) through the x32 ABI (number | 0x40000000): a deny-list filter matching plain numbers would let them through",
		stops: "the seccomp filter checks the architecture and refuses x32 numbers; kernels without x32 return ENOSYS",
		code: `
if ARCH != 'x86_64':
    na('x32', 'x86-64 only')
else:
    X = 0x40000000
    for name, nr, args in (('unshare', 272, (0x10000000,)), ('mount', 165, (b'none', b'/tmp', b'tmpfs', 0, 0)), ('keyctl', 250, (1, 0)),
                           ('ptrace', 101, (16, 1, 0, 0)), ('bpf', 321, (0, 0, 0)), ('setns', 308, (0, 0)), ('init_module', 175, (0, 0, b''))):
        refused_sys('x32-' + name, X | nr, *args)
    # A process that tries one is not a way around the filter either:
    # the same in a child, which the filter may kill.
    r = subprocess.run([sys.executable, '-c', 'import ctypes; l = ctypes.CDLL(None, use_errno=True); l.syscall.restype = ctypes.c_long; print(l.syscall(ctypes.c_long(0x40000000 | 272), ctypes.c_long(0x10000000)))'], capture_output=True, timeout=20)
    if r.returncode == 0 and r.stdout.strip() == b'0':
        bad('x32-unshare-child', 'unshare(CLONE_NEWUSER) through x32 succeeded')
    else:
        ok('x32-unshare-child', 'exit %d %s' % (r.returncode, r.stdout.strip().decode()))
`,
	},
	{
		name:  "AgentThroughTaskDirs",
		tries: "the agent's memory, environment, descriptors, root and cwd through /proc/1/task/<tid>/ and /proc/<tid> of each of its threads rather than /proc/1",
		stops: "the agent is not dumpable (PR_SET_DUMPABLE 0): every thread's /proc entries are root-owned and ptrace-checked",
		// Measured under runsc (local and docker): mem, cwd, root, exe and
		// io stay refused, but the Sentry doesn't apply the agent's
		// non-dumpable flag to the same uid's reads of environ, auxv, maps,
		// smaps and fd, and the agent's pipes open through /proc/1/fd/N.
		userSpaceKernelGap: "gVisor doesn't apply the agent's PR_SET_DUMPABLE 0 to same-uid code: /proc/1 (and each task's) environ (no secret in it), auxv, maps, smaps and the fd list are readable and the agent's pipes open through /proc/1/fd/N; mem, cwd, root, exe stay refused",
		// Where the agent has a uid of its own (local and docker under
		// gVisor), gVisor's /proc still lists its descriptors and shows
		// environ and auxv (mode 0444 whoever the owner: measured), but
		// none of its descriptors opens: its pipes and directories are
		// that uid's. Descriptors a process of the sandbox's code holds
		// too (a kernel's stdout and stderr, a command's pipes) are that
		// code's own on every variant, not the agent's.
		agentUIDCloses: true,
		code: `
tids = sorted(os.listdir('/proc/1/task'))
shared = set()
if USER_SPACE_KERNEL and AGENT_OWN_UID:
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or pid == '1' or pid in tids:
            continue
        try:
            for fd in os.listdir('/proc/%s/fd' % pid):
                # What that process's own entry opens is the sandbox
                # code's anyway.
                p = '/proc/%s/fd/%s' % (pid, fd)
                try:
                    target = os.readlink(p)
                    os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))
                    shared.add(target)
                except OSError:
                    pass
        except OSError:
            pass
accepted = {}
def accept(kind, p):
    accepted.setdefault(kind, []).append(p)
def reopen(what, p):
    try:
        target = os.readlink(p)
    except OSError as e:
        ok(what, 'readlink refused ' + en(e.errno)); return
    if target in shared:
        accept('open through a process of the sandbox code too (a kernel\'s stdout or stderr, a command\'s pipe)', what); return
    for mode in (os.O_RDONLY, os.O_WRONLY):
        try:
            fd = os.open(p, mode | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as e:
            ok(what, '%s refused %s' % (target, en(e.errno))); continue
        st = os.fstat(fd)
        os.close(fd)
        if stat_mod.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) in ((1, 3), (1, 5)):
            ok(what, '%s opens: /dev/null or /dev/zero' % target)
        else:
            bad(what, '%s opened (mode %o)' % (target, mode))
import stat as stat_mod
for tid in tids:
    for base in ('/proc/1/task/%s' % tid, '/proc/%s' % tid):
        for f in ('mem', 'environ', 'cwd', 'root', 'fd', 'map_files', 'exe', 'stack', 'syscall', 'auxv', 'pagemap'):
            p = base + '/' + f
            if USER_SPACE_KERNEL and AGENT_OWN_UID and f in ('environ', 'auxv', 'fd'):
                try:
                    names = os.listdir(p) if f == 'fd' else None
                    if f != 'fd':
                        with open(p, 'rb') as fh:
                            data = fh.read()
                        accept('readable under gVisor (mode 0444 whatever the owner; no secret in it)', p)
                        continue
                except OSError as e:
                    ok(p, 'refused ' + en(e.errno)); continue
                accept('listed under gVisor', p)
                for n in names:
                    reopen(p + '/' + n, p + '/' + n)
                continue
            def probe(p=p):
                if f in ('cwd', 'root', 'exe'):
                    return os.readlink(p)
                if f in ('fd', 'map_files'):
                    return os.listdir(p)
                with open(p, 'rb') as fh:
                    return len(fh.read(64))
            absent_or_refused(p, probe)
for kind, ps in sorted(accepted.items()):
    na('%d entries' % len(ps), kind + ', e.g. ' + ps[0])
`,
	},
	{
		name:        "PidfdAtAgent",
		mayEndAgent: true,
		tries:       "a pidfd of the agent (PID 1) to signal it (SIGKILL, SIGSTOP) and to steal its descriptors (pidfd_getfd: its listening socket), and tgkill of each agent thread",
		stops:       "PID 1 of a pid namespace ignores signals from inside it that it has no handler for; pidfd_getfd needs ptrace access (seccomp refuses it, the agent is not dumpable)",
		code: `
r, e = sysc(NR['pidfd_open'], 1, 0)
if r < 0:
    ok('pidfd_open-1', 'refused ' + en(e))
else:
    pfd = r
    for fd in range(0, 16):
        refused_sys('pidfd_getfd-%d' % fd, NR['pidfd_getfd'], pfd, fd, 0)
    for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM, signal.SIGSEGV):
        sysc(NR['pidfd_send_signal'], pfd, int(sig), 0, 0)
    os.close(pfd)
time.sleep(0.3)
for tid in sorted(os.listdir('/proc/1/task')):
    sysc(NR['tgkill'], 1, int(tid), int(signal.SIGKILL))
time.sleep(0.5)
state = [l for l in open('/proc/1/status') if l.startswith('State:')][0].split()[1]
if state in ('T', 't', 'Z', 'X'):
    bad('agent-state', state)
else:
    ok('agent-state', 'still ' + state + ' after SIGKILL/SIGSTOP by pidfd and tgkill')
`,
	},
	{
		name:        "SigioAtAgent",
		mayEndAgent: true,
		tries:       "fcntl(F_SETOWN) of a pipe to the agent (PID 1) and its process group, with F_SETSIG SIGKILL and O_ASYNC, then I/O: the kernel itself would send the signal",
		stops:       "F_SETOWN to a process of the same uid is allowed, but PID 1 of the namespace drops kernel-sent signals it has no handler for unless they come from an ancestor namespace; the agent ignores SIGIO",
		code: `
F_SETSIG = 10
for target, sig in ((1, 0), (1, int(signal.SIGKILL)), (1, int(signal.SIGSTOP)), (1, int(signal.SIGTERM))):
    r, w = os.pipe()
    try:
        fcntl.fcntl(r, fcntl.F_SETOWN, target)
        if sig:
            fcntl.fcntl(r, F_SETSIG, sig)
        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
        os.write(w, b'x')
    except OSError as e:
        pass
    time.sleep(0.3)
    os.close(r); os.close(w)
    state = [l for l in open('/proc/1/status') if l.startswith('State:')][0].split()[1]
    if state in ('T', 't', 'Z', 'X'):
        bad('sigio-%d-%d' % (target, sig), 'agent state ' + state)
    else:
        ok('sigio-%d-%d' % (target, sig), 'agent still ' + state)
`,
	},
	{
		name:  "Mknod",
		tries: "device nodes made in the writable mounts: the disk (8,0), /dev/mem (1,1), /dev/kmsg (1,11), fuse (10,229), tun (10,200), kvm (10,232), a FIFO and a socket as control",
		stops: "mknod of a device needs CAP_MKNOD (no capability at all; the tmpfs are nodev besides)",
		code: `
import stat
for name, major, minor, kind in (('sda', 8, 0, stat.S_IFBLK), ('mem', 1, 1, stat.S_IFCHR), ('kmsg', 1, 11, stat.S_IFCHR), ('fuse', 10, 229, stat.S_IFCHR),
                                 ('tun', 10, 200, stat.S_IFCHR), ('kvm', 10, 232, stat.S_IFCHR)):
    for d in ('/tmp', '/home/user', '/dev/shm'):
        p = '%s/cs-%s' % (d, name)
        def mk(p=p):
            os.mknod(p, kind | 0o666, os.makedev(major, minor))
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
                os.close(fd)
                return 'made and opened'
            finally:
                os.unlink(p)
        if USER_SPACE_KERNEL and name in ('fuse', 'tun'):
            # gVisor emulates /dev/fuse and /dev/net/tun in the Sentry: a node
            # of theirs reaches the Sentry's own device, never the host's.
            sentry_own('mknod-%s-%s' % (name, d), mk, "the Sentry's own emulated device")
        else:
            refused('mknod-%s-%s' % (name, d), mk)
os.mkfifo('/tmp/cs-fifo'); os.unlink('/tmp/cs-fifo')
print('control fifo made')
`,
	},
	{
		name:  "DeviceNodes",
		tries: "the host's devices by name: memory, ports, disks, the kernel log, fuse, tun (and TUNSETIFF), kvm, vsock, GPUs, consoles, loop and device-mapper control, MSRs",
		stops: "the sandbox's /dev holds only null, zero, full, random, urandom, tty, ptmx and pts (its own tmpfs); no capability for what is there",
		code: `
for p in ('/dev/mem', '/dev/kmem', '/dev/port', '/dev/kmsg', '/dev/sda', '/dev/vda', '/dev/nvme0', '/dev/nvme0n1', '/dev/xvda', '/dev/fuse',
          '/dev/kvm', '/dev/vsock', '/dev/vhost-vsock', '/dev/vhost-net', '/dev/dri/card0', '/dev/nvidia0', '/dev/tty0', '/dev/tty1', '/dev/console',
          '/dev/loop0', '/dev/loop-control', '/dev/mapper/control', '/dev/cpu/0/msr', '/dev/snd/controlC0', '/dev/input/event0', '/dev/hwrng',
          '/dev/watchdog', '/dev/rtc0', '/dev/uinput', '/dev/btrfs-control', '/dev/autofs', '/dev/bsg', '/dev/sg0'):
    def op(p=p):
        fd = os.open(p, os.O_RDWR | os.O_NONBLOCK)
        os.close(fd)
        return 'opened'
    if USER_SPACE_KERNEL and p == '/dev/fuse':
        sentry_own(p, op, "gVisor's /dev/fuse is the Sentry's own")
    else:
        absent_or_refused(p, op)
try:
    fd = os.open('/dev/net/tun', os.O_RDWR)
except OSError as e:
    ok('/dev/net/tun', 'absent or refused ' + en(e.errno))
else:
    TUNSETIFF = 0x400454ca
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack('16sH', b'evil0', 0x0001 | 0x1000))
        bad('TUNSETIFF', 'created a tun device')
    except OSError as e:
        ok('TUNSETIFF', 'refused ' + en(e.errno))
    os.close(fd)
allowed = sorted(os.listdir('/dev'))
odd = [d for d in allowed if d not in ('null', 'zero', 'full', 'random', 'urandom', 'tty', 'ptmx', 'pts', 'shm', 'mqueue', 'fd', 'stdin', 'stdout', 'stderr', 'core', 'termination-log', 'console')]
for d in odd:
    p = '/dev/' + d
    try:
        st = os.lstat(p)
    except OSError:
        continue
    import stat
    if USER_SPACE_KERNEL and d == 'fuse':
        na('dev-listing-fuse', "gVisor's /dev/fuse is the Sentry's own")
    elif stat.S_ISBLK(st.st_mode) or stat.S_ISCHR(st.st_mode):
        bad('dev-listing', 'unexpected device node ' + p)
ok('dev-listing', ' '.join(allowed))
`,
	},
	{
		name:  "NetworkConfiguration",
		tries: "the sandbox's network configuration: loopback down, an address, a route, the MTU (ioctls), and a route through rtnetlink",
		stops: "all need CAP_NET_ADMIN (none); the network namespace is the sandbox's own besides",
		code: `
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
SIOCSIFFLAGS, SIOCSIFADDR, SIOCSIFMTU, SIOCADDRT, SIOCSIFNAME = 0x8914, 0x8916, 0x8922, 0x890B, 0x8923
def ioc(req, arg):
    return fcntl.ioctl(s, req, arg)
# The Sentry doesn't implement these ioctls (ENOTTY): refused all the same.
NETWANT = (errno.EPERM, errno.ENOTTY) if USER_SPACE_KERNEL else (errno.EPERM,)
refused('lo-down', lambda: ioc(SIOCSIFFLAGS, struct.pack('16sh', b'lo', 0) + b'\0' * 22), want=NETWANT)
refused('lo-addr', lambda: ioc(SIOCSIFADDR, struct.pack('16sH2s4s8s', b'lo', socket.AF_INET, b'\0\0', socket.inet_aton('10.9.9.9'), b'\0' * 8)), want=NETWANT)
refused('lo-mtu', lambda: ioc(SIOCSIFMTU, struct.pack('16si', b'lo', 1200) + b'\0' * 20), want=NETWANT)
refused('lo-rename', lambda: ioc(SIOCSIFNAME, struct.pack('16s16s', b'lo', b'evil') + b'\0' * 8), want=NETWANT)
rt = struct.pack('L16s16s16sHhhxxxxLLLLhh', 0, struct.pack('HH4s8s', socket.AF_INET, 0, socket.inet_aton('0.0.0.0'), b''),
                 struct.pack('HH4s8s', socket.AF_INET, 0, socket.inet_aton('127.0.0.1'), b''), struct.pack('HH4s8s', socket.AF_INET, 0, socket.inet_aton('0.0.0.0'), b''),
                 0x0003, 0, 0, 0, 0, 0, 0, 0, 0)
refused('add-route', lambda: ioc(SIOCADDRT, rt), want=NETWANT)
# RTM_NEWROUTE: default route via 127.0.0.1, NLM_F_REQUEST|ACK|CREATE|EXCL.
n = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
rtmsg = struct.pack('BBBBBBBBI', socket.AF_INET, 0, 0, 0, 254, 4, 0, 1, 0)
gw = struct.pack('HH4s', 8, 5, socket.inet_aton('127.0.0.1'))
body = rtmsg + gw
msg = struct.pack('IHHII', 16 + len(body), 24, 0x1 | 0x4 | 0x400 | 0x200, 1, 0) + body
n.sendto(msg, (0, 0))
n.settimeout(5)
resp = n.recv(65536)
err = struct.unpack('i', resp[16:20])[0] if len(resp) >= 20 and struct.unpack('H', resp[4:6])[0] == 2 else None
if err is None or err == 0:
    bad('rtnetlink-newroute', 'accepted (%r)' % (err,))
else:
    ok('rtnetlink-newroute', 'refused ' + en(-err))
`,
	},
	{
		name:  "RealtimeScheduling",
		tries: "real-time and deadline scheduling for itself (a SCHED_FIFO busy loop starves a host CPU), negative nice values, the real-time I/O class",
		stops: "RLIMIT_RTPRIO 0 and no CAP_SYS_NICE; the seccomp filter limits sched_setattr and ioprio_set to the caller",
		code: `
for pol, name in ((os.SCHED_FIFO, 'fifo'), (os.SCHED_RR, 'rr')):
    for prio in (1, 50, 99):
        refused('sched-%s-%d' % (name, prio), lambda pol=pol, prio=prio: os.sched_setscheduler(0, pol, os.sched_param(prio)))
# SCHED_DEADLINE through sched_setattr (struct sched_attr, size 48).
attr = struct.pack('IIQiIQQQ', 48, 6, 0, 0, 0, 10 ** 6, 10 ** 7, 10 ** 7)
buf = ctypes.create_string_buffer(attr)
refused_sys('sched-deadline', NR['sched_setattr'], 0, buf, 0)
if USER_SPACE_KERNEL:
    sentry_own('nice-minus-10', lambda: os.setpriority(os.PRIO_PROCESS, 0, -10), "the Sentry's own nice value, no effect on the host's scheduler")
else:
    refused('nice-minus-10', lambda: os.setpriority(os.PRIO_PROCESS, 0, -10))
refused_sys('ioprio-rt', NR['ioprio_set'], 1, 0, (1 << 13) | 0)
soft, hard = resource.getrlimit(resource.RLIMIT_RTPRIO)
if hard != 0:
    bad('rlimit-rtprio', 'hard limit %d' % hard)
else:
    ok('rlimit-rtprio', 'hard 0')
`,
	},
	{
		name:  "LockedMemory",
		tries: "locking memory (mlockall, mlock of 256 MiB): locked pages can't be reclaimed or swapped, a way around the memory pressure others rely on",
		stops: "RLIMIT_MEMLOCK (bounded, not unlimited) and no CAP_IPC_LOCK",
		code: `
soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
if hard == resource.RLIM_INFINITY or hard > 64 << 20:
    bad('rlimit-memlock', 'hard limit %r' % hard)
else:
    ok('rlimit-memlock', 'hard %d' % hard)
refused('raise-memlock', lambda: resource.setrlimit(resource.RLIMIT_MEMLOCK, (1 << 30, 1 << 30)))
m = mmap.mmap(-1, 256 << 20)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
r = libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(256 << 20))
e = ctypes.get_errno()
if r == 0:
    bad('mlock-256MiB', 'locked'); libc.munlock(ctypes.c_void_p(addr), ctypes.c_size_t(256 << 20))
else:
    ok('mlock-256MiB', 'refused ' + en(e))
r = libc.mlockall(3)
e = ctypes.get_errno()
if r == 0:
    libc.munlockall()
    if hard > 64 << 20:
        bad('mlockall', 'locked everything')
    else:
        ok('mlockall', 'within RLIMIT_MEMLOCK')
else:
    ok('mlockall', 'refused ' + en(e))
`,
	},
	{
		name:  "NullPageMapping",
		tries: "mapping page 0 (and the pages below mmap_min_addr), the classic way to turn a kernel NULL dereference into code execution",
		stops: "vm.mmap_min_addr, which needs CAP_SYS_RAWIO to get under",
		code: `
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FIXED, MAP_PRIVATE, MAP_ANON, MAP_FIXED_NOREPLACE = 0x10, 0x02, 0x20, 0x100000
minaddr = int(open('/proc/sys/vm/mmap_min_addr').read())
if minaddr < 4096:
    bad('mmap_min_addr', '%d: page 0 is mappable by anyone' % minaddr)
else:
    ok('mmap_min_addr', str(minaddr))
for addr in sorted({0, max(0, minaddr - 4096)}):
    for flags, fname in ((MAP_FIXED, 'fixed'), (MAP_FIXED_NOREPLACE, 'noreplace')):
        r = libc.mmap(ctypes.c_void_p(addr), 4096, 3, MAP_PRIVATE | MAP_ANON | flags, -1, 0)
        e = ctypes.get_errno()
        got = r or 0  # ctypes gives None for address 0
        if got == ctypes.c_void_p(-1).value:
            ok('mmap-%#x-%s' % (addr, fname), 'refused ' + en(e))
        elif got == addr:
            bad('mmap-%#x-%s' % (addr, fname), 'mapped below mmap_min_addr')
            libc.munmap(ctypes.c_void_p(got), 4096)
        else:
            libc.munmap(ctypes.c_void_p(got), 4096)
            ok('mmap-%#x-%s' % (addr, fname), 'placed elsewhere (%#x)' % got)
`,
	},
	{
		name:  "FileCapabilities",
		tries: "file capabilities and privileged xattrs on its own files: security.capability (CAP_SYS_ADMIN on a copy of python), trusted.* and security.* attributes",
		stops: "setting security.capability needs CAP_SETFCAP, trusted.* CAP_SYS_ADMIN (none); no_new_privs and nosuid mounts ignore file capabilities on exec besides",
		code: `
import shutil
p = '/tmp/cs-capbin'
shutil.copy(sys.executable, p)
# VFS_CAP_REVISION_2, effective, CAP_SYS_ADMIN (21) permitted.
cap = struct.pack('<IIIII', 0x02000001, 1 << 21, 0, 0, 0)
refused('security.capability', lambda: os.setxattr(p, 'security.capability', cap))
refused('trusted.x', lambda: os.setxattr(p, 'trusted.x', b'1'))
refused('security.evil', lambda: os.setxattr(p, 'security.evil', b'1'))
try:
    os.setxattr(p, 'user.ok', b'1'); print('control user xattr set')
except OSError:
    print('control user xattr unsupported')
r = subprocess.run([p, '-c', 'print(open("/proc/self/status").read().split("CapEff:")[1].split()[0])'], capture_output=True, timeout=20)
if r.stdout.strip() not in (b'0000000000000000', b''):
    bad('exec-capbin', r.stdout.strip().decode())
else:
    ok('exec-capbin', 'CapEff %s' % r.stdout.strip().decode())
os.unlink(p)
`,
	},
	{
		name:  "TerminalInjection",
		tries: "typing into a terminal it shares with the host (TIOCSTI on its standard descriptors, /dev/tty and a new pty), and TIOCLINUX/TIOCCONS console tricks",
		stops: "the agent starts user code in a session of its own with no controlling terminal of the host's; TIOCSTI works only on one's own controlling terminal (and needs CAP_SYS_ADMIN on recent kernels); TIOCCONS needs CAP_SYS_ADMIN",
		code: `
TIOCSTI, TIOCCONS, TIOCLINUX = 0x5412, 0x541D, 0x541C
for fd in (0, 1, 2):
    refused('tiocsti-fd%d' % fd, lambda fd=fd: fcntl.ioctl(fd, TIOCSTI, b'x'))
try:
    t = os.open('/dev/tty', os.O_RDWR | os.O_NOCTTY)
except OSError as e:
    ok('/dev/tty', 'no controlling terminal: ' + en(e.errno))
else:
    refused('tiocsti-tty', lambda: fcntl.ioctl(t, TIOCSTI, b'x'))
    os.close(t)
m, s = os.openpty()
refused('tioccons-pty', lambda: fcntl.ioctl(s, TIOCCONS))
refused('tioclinux-pty', lambda: fcntl.ioctl(s, TIOCLINUX, b'\x0b'))
os.close(m); os.close(s)
print('sid', os.getsid(0), 'pgid', os.getpgid(0))
`,
	},
	{
		name:  "KernelInformation",
		tries: "host-wide kernel information: every host task (/proc/sched_debug), timers, kernel memory (/proc/kcore), keys, kernel symbol addresses (/proc/kallsyms), the kernel log, debugfs, tracefs, securityfs, firmware tables",
		stops: "masked or absent in the sandbox's /proc and /sys; kptr_restrict zeroes symbol addresses without CAP_SYSLOG; dmesg_restrict or the seccomp filter (syslog) for the log",
		code: `
for p in ('/proc/sched_debug', '/proc/timer_list', '/proc/timer_stats', '/proc/kcore', '/proc/latency_stats',
          '/sys/kernel/debug/tracing/trace', '/sys/kernel/tracing/trace', '/sys/kernel/security/lsm', '/sys/firmware/acpi/tables/DSDT',
          '/sys/firmware/dmi/tables/DMI', '/proc/kpageflags', '/proc/kpagecount', '/proc/vmallocinfo', '/proc/slabinfo', '/proc/pagetypeinfo', '/dev/kmsg'):
    try:
        with open(p, 'rb') as f:
            b = f.read(4096)
    except OSError as e:
        ok(p, 'absent' if e.errno == errno.ENOENT else 'refused ' + en(e.errno))
        continue
    if not b.strip():
        ok(p, 'empty (masked)')
    else:
        bad(p, 'readable: %d bytes: %r' % (len(b), b[:80]))
try:
    addrs = [l.split()[0] for _, l in zip(range(2000), open('/proc/kallsyms'))]
except OSError as e:
    ok('/proc/kallsyms', 'refused ' + en(e.errno))
else:
    nonzero = [a for a in addrs if int(a, 16) != 0]
    if nonzero:
        bad('/proc/kallsyms', '%d of %d symbols with addresses' % (len(nonzero), len(addrs)))
    else:
        ok('/proc/kallsyms', 'addresses zeroed (%d symbols)' % len(addrs))
`,
	},
	{
		name:  "KernelHelperPaths",
		tries: "the host-wide helpers the kernel runs as root (the classic container escapes): core_pattern, modprobe, uevent_helper, hotplug, a binfmt_misc interpreter, poweroff_cmd, request_key's helper, and the sysrq trigger",
		stops: "/proc/sys and /sys are read-only in the sandbox, the files belong to the host's root, and writing them needs capabilities of the host's user namespace",
		code: `
for p, v in (('/proc/sys/kernel/core_pattern', '|/tmp/evil'), ('/proc/sys/kernel/modprobe', '/tmp/evil'), ('/sys/kernel/uevent_helper', '/tmp/evil'),
             ('/proc/sys/kernel/hotplug', '/tmp/evil'), ('/proc/sys/fs/binfmt_misc/register', ':evil:E::cs::/tmp/evil:'),
             ('/proc/sys/kernel/poweroff_cmd', '/tmp/evil'), ('/proc/sys/kernel/core_uses_pid', '0'), ('/proc/sys/kernel/kptr_restrict', '0'),
             ('/proc/sys/kernel/dmesg_restrict', '0'), ('/proc/sys/kernel/unprivileged_bpf_disabled', '0'), ('/proc/sys/kernel/yama/ptrace_scope', '0'),
             ('/proc/sys/vm/mmap_min_addr', '0'), ('/proc/sys/kernel/perf_event_paranoid', '-1'), ('/proc/sysrq-trigger', 'h'),
             ('/sys/kernel/mm/ksm/run', '1'), ('/proc/sys/user/max_user_namespaces', '100000')):
    def w(p=p, v=v):
        with open(p, 'w') as f:
            f.write(v)
        return 'wrote'
    absent_or_refused(p, w)
`,
	},
	{
		name:  "CgroupEscape",
		tries: "the cgroup escapes: a release_agent with notify_on_release, mounting a cgroup hierarchy, a child cgroup, moving itself to the parent or root cgroup, enabling controllers",
		stops: "the sandbox's cgroup namespace (its cgroup is its root), a read-only /sys/fs/cgroup (or none), no CAP_SYS_ADMIN for mounts; the seccomp filter refuses mount",
		code: `
for p in ('/sys/fs/cgroup/release_agent', '/sys/fs/cgroup/memory/release_agent', '/sys/fs/cgroup/pids/release_agent', '/sys/fs/cgroup/cpu/release_agent',
          '/sys/fs/cgroup/rdma/release_agent', '/sys/fs/cgroup/systemd/release_agent', '/sys/fs/cgroup/notify_on_release', '/sys/fs/cgroup/memory/notify_on_release',
          '/sys/fs/cgroup/cgroup.subtree_control', '/sys/fs/cgroup/cgroup.procs', '/sys/fs/cgroup/cgroup.max.depth',
          '/sys/fs/cgroup/cgroup.freeze', '/sys/fs/cgroup/cgroup.kill'):
    def w(p=p):
        with open(p, 'w') as f:
            f.write('/tmp/evil' if 'release' in p else ('+memory' if 'subtree' in p else ('0' if 'freeze' in p or 'kill' in p else str(os.getpid()))))
        return 'wrote'
    if p.endswith('cgroup.kill'):
        # Writing 1 would kill the sandbox's own processes at best; 0 is
        # refused as a value anyway, so only the open is the probe.
        def w(p=p):
            fd = os.open(p, os.O_WRONLY); os.close(fd); return 'opened for writing'
    absent_or_refused(p, w)
for d in ('/sys/fs/cgroup/evil', '/sys/fs/cgroup/memory/evil', '/sys/fs/cgroup/pids/evil'):
    absent_or_refused('mkdir ' + d, lambda d=d: os.mkdir(d))
os.makedirs('/tmp/cg', exist_ok=True)
for fstype, opts in (('cgroup', b'memory'), ('cgroup', b'none,name=evil'), ('cgroup2', b'')):
    refused_sys('mount-' + fstype + '-' + opts.decode(), NR['mount'], b'cgroup', b'/tmp/cg', fstype.encode(), 0, opts or 0)
print(open('/proc/self/cgroup').read().strip())
`,
	},
	{
		name:  "HostControlSockets",
		tries: "the host's control sockets by their usual paths (Docker, containerd, CRI-O, kubelet, systemd, D-Bus) and every abstract socket the sandbox can list",
		stops: "none of those paths exists in the sandbox's root; abstract sockets belong to a network namespace, and the sandbox's is its own",
		code: `
for p in ('/var/run/docker.sock', '/run/docker.sock', '/run/containerd/containerd.sock', '/run/containerd/containerd.sock.ttrpc', '/var/run/crio/crio.sock',
          '/run/k3s/containerd/containerd.sock', '/var/lib/kubelet/pod-resources/kubelet.sock', '/var/lib/kubelet/device-plugins/kubelet.sock',
          '/run/systemd/private', '/run/systemd/notify', '/run/systemd/journal/socket', '/run/dbus/system_bus_socket', '/var/run/dbus/system_bus_socket',
          '/run/podman/podman.sock', '/run/user/0/bus', '/run/user/1000/bus'):
    def conn(p=p):
        s = socket.socket(socket.AF_UNIX); s.settimeout(3)
        try:
            s.connect(p); return 'connected'
        finally:
            s.close()
    absent_or_refused(p, conn)
names = set()
for l in open('/proc/net/unix').readlines()[1:]:
    f = l.split()
    if len(f) >= 8 and f[7].startswith('@'):
        names.add(f[7])
for n in sorted(names):
    def conn(n=n):
        s = socket.socket(socket.AF_UNIX); s.settimeout(3)
        try:
            s.connect('\0' + n[1:]); return 'connected'
        finally:
            s.close()
    try:
        conn()
        # An abstract socket of the sandbox's own processes is fine; the
        # host's are not in this list at all (the namespace is the proof).
        ok('abstract ' + n, 'the sandbox\'s own')
    except OSError as e:
        ok('abstract ' + n, 'refused ' + en(e.errno))
ok('abstract-listing', '%d abstract names in the sandbox\'s network namespace' % len(names))
`,
	},
	{
		name:  "ClusterAPI",
		tries: "the orchestrator from inside: the Kubernetes API server (kubernetes.default.svc) anonymously, for the secret holding the sandbox's token; the kubelet's API on the default gateway; a mounted service-account token",
		stops: "no service-account token in the pod (automountServiceAccountToken false); the API server and kubelet refuse anonymous requests; with network none nothing is reachable",
		code: `
import ssl, urllib.request
for p in ('/var/run/secrets/kubernetes.io/serviceaccount/token', '/run/secrets/kubernetes.io/serviceaccount/token'):
    absent_or_refused(p, lambda p=p: open(p).read())
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
            return r.status, r.read(300)
    except urllib.error.HTTPError as e:
        return e.code, b''
    except (OSError, ValueError) as e:
        return None, str(e).encode()
gw = None
for l in open('/proc/net/route').readlines()[1:]:
    f = l.split()
    if f[1] == '00000000':
        gw = socket.inet_ntoa(struct.pack('<I', int(f[2], 16)))
targets = ['https://kubernetes.default.svc/api/v1/namespaces/default/secrets', 'https://kubernetes.default.svc.cluster.local/api/v1/secrets']
if gw:
    targets += ['https://%s:10250/pods' % gw, 'https://%s:6443/api/v1/secrets' % gw, 'http://%s:10255/pods' % gw]
for u in targets:
    code, body = get(u)
    if code is None:
        ok(u, 'unreachable')
    elif code in (401, 403):
        ok(u, 'refused %d' % code)
    else:
        bad(u, 'answered %d %r' % (code, body[:120]))
`,
	},
	{
		name:  "KeyringInformation",
		tries: "the kernel keyrings' host-wide views: /proc/keys (keys the caller may view, with the host's key ids) and /proc/key-users (key counts and quotas of every uid on the host); describing the session and user keyrings",
		stops: "a user namespace of the sandbox's own, which maps no host user but its own (the kernel lists only mapped users); the seccomp filter refuses keyctl",
		code: `
for p in ('/proc/keys', '/proc/key-users'):
    try:
        rows = [l for l in open(p).read().splitlines() if l.strip()]
    except OSError as e:
        ok(p, 'absent' if e.errno == errno.ENOENT else 'refused ' + en(e.errno))
        continue
    if p.endswith('key-users'):
        uids = [r.split(':')[0].strip() for r in rows]
        other = [u for u in uids if u != str(os.getuid())]
        if other:
            bad(p, 'key counts of other users: uids %s' % ','.join(other[:10]))
        else:
            ok(p, '%d rows, only the sandbox user' % len(rows))
    elif rows:
        bad(p, '%d keys listed: %r' % (len(rows), rows[0][:80]))
    else:
        ok(p, 'empty')
for name, ring in (('session', -3), ('user', -4), ('user-session', -5), ('thread', -1), ('process', -2)):
    buf = ctypes.create_string_buffer(256)
    refused_sys('keyctl-describe-' + name, NR['keyctl'], 6, ring, buf, 256)
`,
	},
	{
		name:  "InheritedDescriptors",
		tries: "descriptors the agent let user code inherit: its listening socket (accepting the host's connections would hand user code the access token), its connections, pipes of other kernels, the host's files",
		stops: "the agent opens everything close-on-exec (Go's default) and starts kernels and commands with only their own standard streams and protocol pipes",
		code: `
import stat
def fds(pid):
    out = {}
    for fd in os.listdir('/proc/%s/fd' % pid):
        try:
            out[int(fd)] = os.readlink('/proc/%s/fd/%s' % (pid, fd))
        except OSError:
            pass
    return out
r = subprocess.run([sys.executable, '-c', 'import os, json; print(json.dumps({f: os.readlink("/proc/self/fd/" + f) for f in os.listdir("/proc/self/fd") if os.path.exists("/proc/self/fd/" + f)}))'], capture_output=True, timeout=20, close_fds=False)
import json
child = {int(k): v for k, v in json.loads(r.stdout).items()}
for who, table in (('kernel', fds('self')), ('child', child)):
    for fd, target in sorted(table.items()):
        if fd <= 2:
            continue
        try:
            st = os.fstat(fd) if who == 'kernel' else None
        except OSError:
            st = None
        listening = False
        if st is not None and stat.S_ISSOCK(st.st_mode):
            try:
                so = socket.socket(fileno=os.dup(fd))
                listening = so.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
                so.detach()
            except OSError:
                pass
        if listening:
            bad('%s-fd-%d' % (who, fd), 'a listening socket: %s' % target)
        elif target.startswith('/') and not target.startswith(('/home/user', '/tmp', '/files', '/dev/', '/proc/', '/usr/', '/etc/', '/opt/', '/var/')):
            bad('%s-fd-%d' % (who, fd), 'a host path: %s' % target)
        else:
            ok('%s-fd-%d' % (who, fd), target)
ok('fds-seen', 'kernel %d, child %d' % (len(fds('self')), len(child)))
`,
	},
	{
		name:  "AgentPortHijack",
		tries: "taking over the agent's TCP port (the kubernetes variant's agent listens in the pod, where the port-forward connects to localhost with the access token): binding it again on either loopback or a wildcard, with SO_REUSEADDR and SO_REUSEPORT",
		stops: "the agent holds its port on both loopbacks (127.0.0.1 and ::1) before user code runs; the kernel refuses a second bind of a listening port",
		code: `
ports = set()
for f in ('/proc/net/tcp', '/proc/net/tcp6'):
    for l in open(f).readlines()[1:]:
        x = l.split()
        if x[3] == '0A':
            ports.add(int(x[1].rsplit(':', 1)[1], 16))
mine = set()
if not ports:
    ok('no-tcp-listener', 'the agent listens on no TCP port here (a unix socket outside the sandbox\'s reach)')
for p in sorted(ports):
    # Where a connection to "localhost" can land: both loopbacks and the
    # wildcards that cover them.
    for fam, addr in ((socket.AF_INET, '0.0.0.0'), (socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::'), (socket.AF_INET6, '::1')):
        for opt in (None, socket.SO_REUSEADDR, socket.SO_REUSEPORT):
            s = socket.socket(fam, socket.SOCK_STREAM)
            try:
                if opt:
                    s.setsockopt(socket.SOL_SOCKET, opt, 1)
                s.bind((addr, p)); s.listen(1)
                bad('bind-%s-%d-%s' % (addr, p, opt), 'bound the agent\'s port')
            except OSError as e:
                ok('bind-%s-%d-%s' % (addr, p, opt), 'refused ' + en(e.errno))
            finally:
                s.close()
`,
	},
	{
		name:  "PidProbing",
		tries: "finding other processes by number rather than through /proc: kill(pid, 0) and pidfd_open for every pid up to 65536, to reach the host's or another sandbox's",
		stops: "the sandbox's own pid namespace: only its own processes have numbers in it",
		code: `
own = {int(p) for p in os.listdir('/proc') if p.isdigit()}
if len(own) > 64:
    bad('pid-namespace', '%d processes in /proc: not a namespace of the sandbox\'s own' % len(own))
found = []
for pid in range(1, 65537):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        continue
    except PermissionError:
        pass
    if pid not in own and os.path.exists('/proc/%d' % pid) is False:
        found.append(pid)
# Processes started meanwhile (this probe's own) are the sandbox's.
now = {int(p) for p in os.listdir('/proc') if p.isdigit()}
found = [p for p in found if p not in now]
if found:
    bad('kill-0', 'pids outside the sandbox\'s /proc answer: %s' % found[:20])
else:
    ok('kill-0', 'only the sandbox\'s %d processes answer among 65536 pids' % len(own))
hits = []
for pid in range(1, 65537):
    r, e = sysc(NR['pidfd_open'], pid, 0)
    if r >= 0:
        os.close(r)
        if pid not in now and not os.path.exists('/proc/%d' % pid):
            hits.append(pid)
if hits:
    bad('pidfd_open', 'pids outside the sandbox: %s' % hits[:20])
else:
    ok('pidfd_open', 'only the sandbox\'s own')
`,
	},
	{
		name:  "NetworkNamespaceViews",
		tries: "the host's network state through /proc: its listening sockets and connections (/proc/net/tcp, udp, unix), routes, interfaces, ARP and netfilter tables",
		stops: "a network namespace of the sandbox's own: /proc/net shows only it (loopback, and tun0 or the pod's interface)",
		code: `
ifaces = sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:])
host_like = [i for i in ifaces if i.startswith(('docker', 'br-', 'veth', 'cni', 'flannel', 'cali', 'ens', 'enp', 'wl', 'virbr', 'kube', 'tailscale', 'wg'))]
if host_like:
    bad('interfaces', 'host interfaces visible: %s' % host_like)
else:
    ok('interfaces', ' '.join(ifaces))
listen = []
for f in ('/proc/net/tcp', '/proc/net/tcp6'):
    for l in open(f).readlines()[1:]:
        x = l.split()
        if x[3] == '0A':
            listen.append(int(x[1].rsplit(':', 1)[1], 16))
# The node's or host's usual services: sshd, the API server, kubelet,
# etcd, containerd's stream server, dockerd.
host_ports = [p for p in listen if p in (22, 6443, 10250, 10255, 2379, 2380, 2375, 2376, 10010)]
if host_ports:
    bad('listeners', 'host service ports listening in the sandbox\'s namespace: %s' % host_ports)
else:
    ok('listeners', 'listening ports: %s' % sorted(set(listen)))
routes = [l.split()[0] for l in open('/proc/net/route').readlines()[1:]]
ok('routes', 'devices with routes: %s' % sorted(set(routes)))
for p in ('/proc/net/ip_tables_names', '/proc/net/nf_conntrack', '/proc/net/arp'):
    try:
        rows = open(p).read().strip().splitlines()
    except OSError as e:
        ok(p, 'absent or refused ' + en(e.errno)); continue
    if p.endswith('conntrack') and rows:
        bad(p, '%d tracked connections visible' % len(rows))
    else:
        ok(p, '%d rows' % len(rows))
`,
	},
	{
		name:  "TimeNamespace",
		tries: "moving the clock: adjtimex and clock_adjtime in write mode, a time namespace with boot/monotonic offsets",
		stops: "the seccomp filter refuses adjtimex/clock_adjtime and namespaces; setting the clock needs CAP_SYS_TIME besides",
		code: `
tx = ctypes.create_string_buffer(208)
struct.pack_into('I', tx, 0, 0x0001)  # ADJ_OFFSET
refused_sys('adjtimex-offset', NR['adjtimex'], tx)
refused_sys('clock_adjtime-realtime', NR['clock_adjtime'], 0, tx)
refused_sys('unshare-newtime', NR['unshare'], 0x00000080)
def timens():
    fd = os.open('/proc/self/timens_offsets', os.O_WRONLY)
    try:
        return os.write(fd, b'monotonic 1000 0')
    finally:
        os.close(fd)
absent_or_refused('timens_offsets', timens)
t0 = time.time(); time.sleep(0.05)
print('clock moves', time.time() - t0 > 0)
`,
	},
	{
		name:  "CoreDumps",
		tries: "a core dump of a crashing process: where the host's core_pattern is a pipe, the kernel hands the dump to a host helper running as root",
		stops: "RLIMIT_CORE 0, hard (the sandbox cannot raise it): no dump is ever produced",
		code: `
soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
try:
    pattern = open('/proc/sys/kernel/core_pattern').read().strip()
except FileNotFoundError:
    pattern = 'absent'  # gVisor's /proc/sys has none: its Sentry dumps no core
if hard != 0:
    bad('rlimit-core', 'hard %r (core_pattern %r)' % (hard, pattern))
else:
    ok('rlimit-core', 'hard 0 (core_pattern %r)' % pattern)
refused('raise-core', lambda: resource.setrlimit(resource.RLIMIT_CORE, (1 << 30, 1 << 30)))
r = subprocess.run([sys.executable, '-c', 'import os, signal; os.chdir("/tmp"); os.kill(os.getpid(), signal.SIGSEGV)'], capture_output=True, timeout=20)
cores = [f for f in os.listdir('/tmp') if f.startswith('core')]
if cores:
    bad('crash', 'core files %r' % cores)
else:
    ok('crash', 'exit %d, no core' % r.returncode)
`,
	},
	{
		name:  "AgentBinary",
		tries: "rewriting the agent's executable (CVE-2019-5736 style) through /proc/1/exe, through the path it names, and through a descriptor of a process running it",
		stops: "the agent is not dumpable (/proc/1/exe is closed), its binary is on a read-only mount, and a running executable can't be opened for writing (ETXTBSY)",
		code: `
absent_or_refused('/proc/1/exe', lambda: open('/proc/1/exe', 'r+b'))
target = None
for p in ('/usr/local/libexec/code-sandboxes-agent', '/proc/1/exe'):
    try:
        target = os.readlink(p) if p.startswith('/proc') else p
    except OSError:
        pass
for p in ('/usr/local/libexec/code-sandboxes-agent', '/.code-sandboxes/agent', '/sbin/init'):
    if os.path.exists(p):
        absent_or_refused('write ' + p, lambda p=p: open(p, 'r+b'))
        absent_or_refused('rename ' + p, lambda p=p: os.rename(p, p + '.evil'))
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        exe = os.readlink('/proc/%s/exe' % pid)
    except OSError:
        continue
    if 'code-sandboxes' in exe or 'agent' in exe:
        absent_or_refused('write /proc/%s/exe' % pid, lambda pid=pid: open('/proc/%s/exe' % pid, 'r+b'))
ok('done', 'agent binary %r' % target)
`,
	},
	{
		name:  "ReopenThroughProcFd",
		tries: "turning a read-only descriptor into a writable one by reopening /proc/self/fd/N (a read-only file of the image, the sandbox's resolv.conf and hosts, a read-only directory: /usr, /etc, and / unless it is the sandbox's own tmpfs)",
		stops: "reopening through /proc checks the file's own permissions and the mount's read-only flag again",
		code: `
for p in ('/etc/passwd', '/etc/hosts', '/etc/resolv.conf', '/etc/hostname', '/usr/bin/python3', sys.executable):
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        continue
    refused('reopen-rw ' + p, lambda fd=fd: open('/proc/self/fd/%d' % fd, 'r+b'))
    os.close(fd)
# Directories of read-only mounts (the image's or the host's system
# directories) must stay read-only through a descriptor too. / itself is
# probed only when it is not the sandbox's own writable tmpfs (the local
# variant's root is one, by design: mkdir /x works there).
def root_is_own_tmpfs():
    root = None
    for l in open('/proc/self/mountinfo'):
        a, b = l.split(' - ', 1)
        if a.split()[4] == '/':
            root = (b.split()[0], a.split()[5].split(','))
    return root is not None and root[0] == 'tmpfs' and 'rw' in root[1]
dirs = ['/usr', '/etc']
if root_is_own_tmpfs():
    na('mkdir-at-root-fd', "/ is the sandbox's own writable tmpfs")
else:
    dirs.insert(0, '/')
for d in dirs:
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        continue
    refused('mkdir-at-fd ' + d, lambda fd=fd: os.mkdir('cs-evil', dir_fd=fd))
    refused('create-at-proc-fd ' + d, lambda fd=fd: open('/proc/self/fd/%d/cs-evil' % fd, 'w'))
    os.close(fd)
`,
	},
	{
		name:  "Hardlinks",
		tries: "hard links to files it does not own (the host's or root's: /etc/shadow, the agent, setuid programs) in its writable directories, to keep or change them",
		stops: "protected_hardlinks (linking needs ownership or read-write access) and mounts: the writable tmpfs are other file systems than the read-only root (EXDEV)",
		code: `
for src in ('/etc/shadow', '/etc/passwd', '/usr/bin/passwd', '/usr/local/libexec/code-sandboxes-agent', '/usr/bin/python3', '/proc/1/exe'):
    if not os.path.lexists(src):
        continue
    for d in ('/tmp', '/home/user'):
        dst = d + '/cs-link'
        def ln(src=src, dst=dst):
            os.link(src, dst)
            os.unlink(dst)
            return 'linked'
        refused('link %s -> %s' % (src, d), ln)
`,
	},
	{
		name:  "ProcRootWrites",
		tries: "writes into the system directories through /proc's views of the root and the working directory (/proc/self/root, /proc/thread-self/root, /proc/1/root, /proc/self/cwd after chdir /, /proc/self/fd and /dev/fd of a descriptor of /, '..' past / from a descriptor of it): the build-jail trick of reaching the real root through /proc",
		stops: "those views resolve to the sandbox's own root, whose system directories are read-only mounts; the agent's /proc/1/root needs ptrace access (non-dumpable, another uid)",
		code: `
rootfd = os.open('/', os.O_RDONLY | os.O_DIRECTORY)
os.chdir('/')
views = ['/proc/self/root', '/proc/thread-self/root', '/proc/1/root', '/proc/self/cwd', '/proc/self/fd/%d' % rootfd, '/dev/fd/%d' % rootfd]
def own_root_tmpfs():
    for l in open('/proc/self/mountinfo'):
        a, b = l.split(' - ', 1)
        if a.split()[4] == '/':
            return b.split()[0] == 'tmpfs' and 'rw' in a.split()[5].split(',')
    return False
targets = ['etc/cs-evil', 'usr/cs-evil', 'usr/bin/cs-evil', 'etc/passwd']
if not own_root_tmpfs():
    targets.append('cs-evil')
else:
    na('write-at-root', "/ is the sandbox's own writable tmpfs")
def write(p):
    f = open(p, 'a')
    f.close()
    if p.endswith('cs-evil'):
        os.unlink(p)
    return 'written'
for v in views:
    for t in targets:
        refused('write %s/%s' % (v, t), lambda p=v + '/' + t: write(p))
    refused('mkdir %s/usr/cs-evil-dir' % v, lambda v=v: os.mkdir(v + '/usr/cs-evil-dir'))
# '..' from a descriptor of / stays at /.
def dotdot():
    fd = os.open('../../../..', os.O_RDONLY | os.O_DIRECTORY, dir_fd=rootfd)
    try:
        return write('/proc/self/fd/%d/etc/cs-evil' % fd)
    finally:
        os.close(fd)
refused('write ../../../../etc from a descriptor of /', dotdot)
os.close(rootfd)
`,
	},
	{
		name:  "SystemFileMetadata",
		tries: "changing the system files and directories without writing to them: chmod, chown, utime, truncate, rename, unlink, rmdir, a symlink, FIFO or file planted in them, a user.* extended attribute (/etc/passwd, /etc/hosts, /etc/resolv.conf, the Python binary, /bin/sh, /usr/lib, /etc, the agent's binary)",
		stops: "read-only mounts (EROFS) and ownership: the sandbox's user owns none of them (EPERM/EACCES); a file bound by the runtime is busy (EBUSY)",
		code: `
files = [p for p in ('/etc/passwd', '/etc/hosts', '/etc/resolv.conf', '/bin/sh', os.path.realpath(sys.executable),
                     '/usr/local/libexec/code-sandboxes-agent', '/opt/code-sandboxes/code-sandboxes-agent') if os.path.lexists(p)]
dirs = [p for p in ('/etc', '/usr/lib', '/usr/bin') if os.path.isdir(p)]
before = {p: os.lstat(p) for p in files + dirs}
for p in files + dirs:
    refused('chmod ' + p, lambda p=p: os.chmod(p, 0o777))
    refused('chown ' + p, lambda p=p: os.chown(p, os.getuid(), os.getgid()))
    refused('utime ' + p, lambda p=p: os.utime(p, (0, 0)))
    refused('utime-now ' + p, lambda p=p: os.utime(p, None))
    refused('setxattr user ' + p, lambda p=p: os.setxattr(p, 'user.cs', b'x'))
    refused('rename ' + p, lambda p=p: os.rename(p, p + '.cs-moved'))
for p in files:
    refused('truncate ' + p, lambda p=p: os.truncate(p, 0))
    refused('unlink ' + p, lambda p=p: os.unlink(p))
for d in dirs:
    refused('rmdir ' + d, lambda d=d: os.rmdir(d))
    refused('symlink in ' + d, lambda d=d: os.symlink('/tmp/cs-evil', d + '/cs-evil'))
    refused('mkfifo in ' + d, lambda d=d: os.mkfifo(d + '/cs-evil'))
    refused('create in ' + d, lambda d=d: os.close(os.open(d + '/cs-evil', os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)))
# Whatever the answers said, nothing of them changed.
for p, st in before.items():
    now = os.lstat(p) if os.path.lexists(p) else None
    if now is None or (now.st_mode, now.st_uid, now.st_gid, now.st_size, now.st_mtime_ns) != (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns):
        bad('unchanged ' + p, 'CHANGED %r -> %r' % (st, now))
    else:
        ok('unchanged ' + p)
`,
	},
	{
		name:  "SetuidPlanted",
		tries: "a setuid/setgid program planted where the sandbox can write (/tmp, /home/user, /files, /dev/shm): its own copy of id with mode 6755, and, where the sandbox has a root user (sudo), one made root's by it, run as the sandbox's user",
		stops: "no_new_privs on every process (exec ignores the setuid and setgid bits) and, where set, nosuid on the writable mounts",
		code: `
import shutil, stat
status = open('/proc/self/status').read()
nnp = any(l.split()[1] == '1' for l in status.splitlines() if l.startswith('NoNewPrivs:'))
def mount_opts(d):
    best, opts = '', []
    for l in open('/proc/self/mountinfo'):
        a = l.split(' - ', 1)[0].split()
        mp = a[4]
        if (d == mp or d.startswith(mp.rstrip('/') + '/')) and len(mp) >= len(best):
            best, opts = mp, a[5].split(',')
    return opts
src = shutil.which('id')
uid, gid = str(os.geteuid()), str(os.getegid())
for d in ('/tmp', '/home/user', '/files', '/dev/shm'):
    if not os.path.isdir(d) or not os.access(d, os.W_OK):
        continue
    f = d + '/cs-suid'
    try:
        shutil.copy(src, f)
        os.chmod(f, 0o6755)
    except OSError as e:
        ok('plant ' + d, 'refused ' + en(e.errno))
        continue
    try:
        r = subprocess.run([f, '-u'], capture_output=True, text=True, timeout=30)
        g = subprocess.run([f, '-g'], capture_output=True, text=True, timeout=30)
    except OSError as e:
        ok('setuid-own ' + d, 'exec refused ' + en(e.errno) + (' (noexec mount)' if 'noexec' in mount_opts(d) else ''))
        os.unlink(f)
        continue
    how = 'nosuid mount' if 'nosuid' in mount_opts(d) else ('no_new_privs' if nnp else 'owned by the sandbox user')
    if r.stdout.strip() == uid and g.stdout.strip() == gid:
        ok('setuid-own ' + d, 'ran as %s/%s (%s)' % (uid, gid, how))
    else:
        bad('setuid-own ' + d, 'ran as %r/%r' % (r.stdout.strip(), g.stdout.strip()))
    os.unlink(f)
# A setuid-root program made by the sandbox's own root user (sudo).
sudo = shutil.which('sudo')
made = False
if sudo and uid != '0':
    f = '/tmp/cs-rsuid'
    r = subprocess.run([sudo, '-n', 'sh', '-c', 'cp %s %s && chown 0:0 %s && chmod 6755 %s' % (src, f, f, f)], capture_output=True, text=True, timeout=30)
    st = os.stat(f) if os.path.exists(f) else None
    # Root's, seen from the sandbox's user: 0, or the overflow uid where
    # the root user's uid is not mapped in the user's namespace.
    if r.returncode == 0 and st is not None and str(st.st_uid) != uid and st.st_mode & stat.S_ISUID:
        made = True
        r = subprocess.run([f, '-u'], capture_output=True, text=True, timeout=30)
        if r.stdout.strip() == uid:
            ok('setuid-root-made-by-sudo /tmp', 'owner %d, ran as %s (%s)' % (st.st_uid, uid, 'nosuid mount' if 'nosuid' in mount_opts('/tmp') else 'no_new_privs'))
        else:
            bad('setuid-root-made-by-sudo /tmp', 'ran as %r' % r.stdout.strip())
    subprocess.run([sudo, '-n', 'rm', '-f', f], capture_output=True, timeout=30)
    why = (r.stdout + r.stderr).strip()[:200]
if not made:
    na('setuid-root-made-by-sudo', ('no root user here to make one: ' + why) if sudo else 'no sudo in this sandbox')
`,
	},
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
