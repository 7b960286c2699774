// Probe cases reaching for the host: cgroups, its control sockets, a cluster's API.

package hostile

var probeCgroupEscape = probeCase{
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
}

var probeHostControlSockets = probeCase{
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
}

var probeClusterAPI = probeCase{
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
}
