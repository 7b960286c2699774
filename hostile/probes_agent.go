// Probe cases against the agent (PID 1): its task directories, pidfds, signals, port, binary, descriptors.

package hostile

var probeAgentThroughTaskDirs = probeCase{
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
}

var probePidfdAtAgent = probeCase{
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
}

var probeSigioAtAgent = probeCase{
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
}

var probeInheritedDescriptors = probeCase{
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
}

var probeAgentPortHijack = probeCase{
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
}

var probePidProbing = probeCase{
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
}

var probeAgentBinary = probeCase{
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
}
