// Network policy none: the probes user code must fail, and the socket families it must not get.

package hostile

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

func (c *suite) networkNone(t *testing.T) {
	sb := c.victim
	if c.cfg.NetworkPolicy != sandboxes.NetworkNone {
		t.Skip("the suite's config is not network none")
	}
	var port int
	abstract := ""
	if c.o.SameHost {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port = ln.Addr().(*net.TCPAddr).Port
		abstract = "cs-hostile-" + strconv.Itoa(os.Getpid())
		al, err := net.Listen("unix", "@"+abstract)
		if err == nil {
			defer al.Close()
		} else {
			abstract = ""
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	code := `import socket, os
def tcp(host, port, fam=socket.AF_INET):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3)
    try:
        s.connect((host, port)); return 'CONNECTED'
    except OSError as e:
        return 'blocked ' + type(e).__name__
    finally:
        s.close()
print('tcp 1.1.1.1:443', tcp('1.1.1.1', 443))
print('tcp 8.8.8.8:53', tcp('8.8.8.8', 53))
print('tcp6 2606:4700:4700::1111', tcp('2606:4700:4700::1111', 443, socket.AF_INET6))
if ` + strconv.Itoa(port) + `:
    print('tcp host-loopback', tcp('127.0.0.1', ` + strconv.Itoa(port) + `))
try:
    socket.getaddrinfo('example.com', 443); print('dns RESOLVED')
except OSError as e:
    print('dns blocked', type(e).__name__)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b'x', ('1.1.1.1', 53)); print('udp SENT')
except OSError as e:
    print('udp blocked', type(e).__name__)
if ` + pyStr(abstract) + `:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect('\0' + ` + pyStr(abstract) + `); print('abstract-unix CONNECTED')
    except OSError as e:
        print('abstract-unix blocked', type(e).__name__)
print('interfaces', sorted(os.listdir('/sys/class/net')) if os.path.isdir('/sys/class/net') else [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]])
`
	ex := py(t, sb, code)
	n := 0
	for _, l := range strings.Split(out(ex), "\n") {
		if strings.Contains(l, "CONNECTED") || strings.Contains(l, "RESOLVED") {
			t.Errorf("network none reached out: %s", l)
		}
		if strings.Contains(l, "blocked") {
			n++
		}
		if strings.HasPrefix(l, "udp SENT") {
			// sendto may "succeed" into a void only if a route exists.
			t.Errorf("network none has a route out: %s", l)
		}
		if strings.HasPrefix(l, "interfaces") && l != "interfaces ['lo']" {
			t.Errorf("network none has more than loopback: %s", l)
		}
	}
	record(t, "%d/%d reach-out attempts refused (internet v4/v6, DNS, UDP, host loopback, host abstract socket); interfaces: lo only", n, strings.Count(out(ex), "\n"))
}

// probes is Python that attempts every escalation with raw syscalls, so that
// the answer comes from the kernel and our filter, not from a wrapper. The
// arguments are invalid or harmless, so even an allowed call changes
// nothing: what matters is the errno (EPERM/ENOSYS/EACCES = refused before
// argument checks; EFAULT/EINVAL would mean the call got through).
const probes = `import ctypes, errno, os, platform, socket, subprocess
libc = ctypes.CDLL(None, use_errno=True)
NR = {
 'x86_64': dict(ptrace=101, unshare=272, mount=165, umount2=166, keyctl=250, add_key=248, request_key=249, bpf=321, perf_event_open=298,
                userfaultfd=323, io_uring_setup=425, setns=308, init_module=175, finit_module=313, kexec_load=246, reboot=169,
                chroot=161, pivot_root=155, process_vm_readv=310, process_vm_writev=311, open_by_handle_at=304, syslog=103,
                swapon=167, clock_settime=227, settimeofday=164, fsopen=430, open_tree=428, move_mount=429, kcmp=312,
                pidfd_getfd=438, acct=163, quotactl=179, iopl=172, ioperm=173, name_to_handle_at=303),
 'aarch64': dict(ptrace=117, unshare=97, mount=40, umount2=39, keyctl=219, add_key=217, request_key=218, bpf=280, perf_event_open=241,
                 userfaultfd=282, io_uring_setup=425, setns=268, init_module=105, finit_module=273, kexec_load=104, reboot=142,
                 chroot=51, pivot_root=41, process_vm_readv=270, process_vm_writev=271, open_by_handle_at=265, syslog=116,
                 swapon=224, clock_settime=112, settimeofday=170, fsopen=430, open_tree=428, move_mount=429, kcmp=272,
                 pidfd_getfd=438, acct=89, quotactl=60, name_to_handle_at=264),
}[platform.machine()]
buf = ctypes.create_string_buffer(4096)
def sc(name, *args):
    a = [ctypes.c_void_p(x) if isinstance(x, int) else x for x in args]
    r = libc.syscall(ctypes.c_long(NR[name]), *a)
    e = ctypes.get_errno()
    if r >= 0:
        print(name, 'ALLOWED', r)
    else:
        print(name, 'refused' if e in (errno.EPERM, errno.ENOSYS, errno.EACCES) else 'GOT-THROUGH', errno.errorcode.get(e, e))
sc('ptrace', 16, 1, 0, 0)                 # PTRACE_ATTACH to the agent
sc('process_vm_readv', 1, buf, 1, buf, 1, 0)
sc('process_vm_writev', 1, buf, 1, buf, 1, 0)
sc('kcmp', 1, os.getpid(), 0, 0, 0)
sc('pidfd_getfd', 0, 0, 0)
sc('unshare', 0x10000000)                 # CLONE_NEWUSER
sc('unshare', 0x00020000)                 # CLONE_NEWNS
sc('setns', 0, 0)
sc('mount', b'none', b'/tmp', b'tmpfs', 0, 0)
sc('umount2', b'/tmp', 2)
sc('chroot', b'/tmp')
sc('pivot_root', b'/tmp', b'/tmp')
sc('fsopen', b'tmpfs', 0)
sc('open_tree', -100, b'/', 1)
sc('move_mount', -100, b'/', -100, b'/tmp', 0)
sc('keyctl', 1, 0)                        # KEYCTL_JOIN_SESSION_KEYRING
sc('add_key', b'user', b'k', b'v', 1, -3)
sc('request_key', b'user', b'k', 0, 0)
sc('bpf', 0, buf, 128)                    # BPF_MAP_CREATE
sc('perf_event_open', buf, 0, -1, -1, 0)
sc('userfaultfd', 0)
sc('io_uring_setup', 1, buf)
sc('init_module', 0, 0, b'')
sc('finit_module', -1, b'', 0)
sc('kexec_load', 0, 0, 0, 0)
sc('reboot', 0xfee1dead, 672274793, 0)    # LINUX_REBOOT_CMD_CAD_OFF
sc('syslog', 3, buf, 100)
sc('swapon', b'/tmp/x', 0)
sc('clock_settime', 0, 0)
sc('settimeofday', 0, 0)
sc('acct', 0)
sc('quotactl', 0, 0, 0, 0)
sc('open_by_handle_at', -100, buf, 0)
sc('name_to_handle_at', -100, b'/', buf, buf, 0)
if 'iopl' in NR:
    sc('iopl', 3)
    sc('ioperm', 0, 1, 1)
for fam, typ, name in ((socket.AF_INET, socket.SOCK_RAW, 'raw-socket'), (17, socket.SOCK_RAW, 'packet-socket'), (16, socket.SOCK_RAW, 'netlink-audit')):
    try:
        s = socket.socket(fam, typ, 9 if fam == 16 else (1 if fam == socket.AF_INET else 0))
        if fam == 16:
            s.close(); print(name, 'opened (netlink is allowed; writes need CAP_AUDIT_WRITE)')
        else:
            s.close(); print(name, 'ALLOWED')
    except OSError as e:
        print(name, 'refused', type(e).__name__)
def write_agent_mem():
    # Rewrite one byte of the agent's writable memory with its own value:
    # proves write access without changing anything.
    for l in open('/proc/1/maps'):
        f = l.split()
        if f[1].startswith('rw'):
            addr = int(f[0].split('-')[0], 16)
            break
    fd = os.open('/proc/1/mem', os.O_RDWR)
    try:
        b = os.pread(fd, 1, addr)
        if os.pwrite(fd, b, addr) != 1:
            raise OSError(5, 'short write')
    finally:
        os.close(fd)
for fn, name in ((lambda: os.setuid(0), 'setuid0'), (lambda: os.setgid(0), 'setgid0'), (lambda: os.setgroups([0]), 'setgroups'),
                 (lambda: os.sethostname('evil') if hasattr(os, 'sethostname') else libc.sethostname(b'evil', 4) and (_ for _ in ()).throw(OSError(ctypes.get_errno(), 'sethostname')), 'sethostname'),
                 (lambda: os.nice(-5), 'nice-5'),
                 (write_agent_mem, 'write-agent-mem')):
    try:
        fn(); print(name, 'ALLOWED')
    except OSError as e:
        print(name, 'refused', type(e).__name__)
st = open('/proc/self/status').read()
print('caps', [l.split()[1] for l in st.splitlines() if l.startswith(('CapEff', 'CapPrm', 'CapBnd', 'CapAmb', 'CapInh'))])
print('nnp', [str(libc.prctl(39, 0, 0, 0, 0))], 'seccomp', [l.split()[1] for l in st.splitlines() if l.startswith('Seccomp:')])
for cmd in (['unshare', '-U', '-r', 'true'], ['unshare', '-n', 'true'], ['unshare', '-m', 'true'], ['mount', '-t', 'tmpfs', 'x', '/mnt']):
    r = subprocess.run(cmd, capture_output=True, timeout=20)
    print(' '.join(cmd).replace(' ', '_'), 'ALLOWED' if r.returncode == 0 else 'refused', r.returncode)
# i386 syscalls through int 0x80 must kill the caller, not bypass the filter.
if platform.machine() == 'x86_64':
    r = subprocess.run(['python3', '-c', '''
import ctypes, mmap
code = bytes([0xb8, 0x1a, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax, 26 (ptrace on i386); int 0x80; ret
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
f = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("int80 returned", f())
'''], capture_output=True, timeout=20)
    print('int80', 'refused' if r.returncode < 0 or b'returned -' in r.stdout else 'GOT-THROUGH', r.returncode, r.stdout.strip().decode())
`

// socketFamilies: only unix, inet, inet6 and netlink route/sock_diag
// sockets exist for user code. vsock ignores network namespaces (on a VM
// host it reaches the hypervisor); the others are kernel attack surface no
// sandboxed program needs. Garbage in the upper half of the family (which
// the kernel ignores) must not get past the filter.
func (c *suite) socketFamilies(t *testing.T) {
	ex := py(t, c.victim, `import ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
import platform
NR_SOCKET = {'x86_64': 41, 'aarch64': 198}[platform.machine()]
def raw(fam, typ, proto):
    r = libc.syscall(ctypes.c_long(NR_SOCKET), ctypes.c_long(fam), ctypes.c_long(typ), ctypes.c_long(proto))
    e = ctypes.get_errno()
    if r >= 0:
        import os; os.close(r); return 'ALLOWED'
    return 'refused ' + errno.errorcode.get(e, str(e))
cases = [('vsock', 40, 1, 0), ('vsock-hi', (1 << 32) | 40, 1, 0), ('packet', 17, 3, 0), ('packet-hi', (1 << 40) | 17, 3, 0),
         ('alg', 38, 5, 0), ('bluetooth', 31, 3, 0), ('can', 29, 3, 1), ('key', 15, 3, 2), ('rds', 21, 5, 0), ('tipc', 30, 5, 0),
         ('xdp', 44, 3, 0), ('netlink-audit', 16, 3, 9), ('netlink-uevent', 16, 3, 15), ('netlink-netfilter', 16, 3, 12), ('x25', 9, 5, 0)]
for name, fam, typ, proto in cases:
    print(name, raw(fam, typ, proto))
for name, fam, typ, proto in (('unix', 1, 1, 0), ('inet', 2, 1, 0), ('inet6', 10, 2, 0), ('netlink-route', 16, 3, 0)):
    print('ok-' + name, raw(fam, typ, proto))
try:
    socket.socketpair(40, socket.SOCK_STREAM); print('socketpair-vsock ALLOWED')
except OSError as e:
    print('socketpair-vsock refused', errno.errorcode.get(e.errno, e.errno))
`)
	refused, total := 0, 0
	for _, l := range strings.Split(out(ex), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		if strings.HasPrefix(f[0], "ok-") {
			if f[1] != "ALLOWED" {
				t.Errorf("a family programs need is refused: %s", l)
			}
			continue
		}
		total++
		if f[1] == "refused" {
			refused++
		} else {
			t.Errorf("socket family not refused: %s", l)
		}
	}
	if total < 16 || ex.Error != nil {
		t.Fatalf("probe incomplete (%d lines): %s %v", total, out(ex), ex.Error)
	}
	record(t, "%d/%d sockets of other families refused (vsock, packet, alg, bluetooth, can, key, rds, tipc, xdp, x25, netlink audit/uevent/netfilter, with garbage in the upper half too); unix, inet, inet6, netlink route open", refused, total)
}
