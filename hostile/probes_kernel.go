// Probe cases at the kernel's interfaces: other ABIs, devices, scheduling, memory, keyrings, namespaces, core dumps.

package hostile

var probeX32ABI = probeCase{
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
}

var probeMknod = probeCase{
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
}

var probeDeviceNodes = probeCase{
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
}

var probeNetworkConfiguration = probeCase{
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
}

var probeRealtimeScheduling = probeCase{
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
}

var probeLockedMemory = probeCase{
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
}

var probeNullPageMapping = probeCase{
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
}

var probeTerminalInjection = probeCase{
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
}

var probeKernelInformation = probeCase{
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
}

var probeKernelHelperPaths = probeCase{
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
}

var probeKeyringInformation = probeCase{
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
}

var probeNetworkNamespaceViews = probeCase{
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
}

var probeTimeNamespace = probeCase{
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
}

var probeCoreDumps = probeCase{
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
}
