package hostile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

type namedCase struct {
	name string
	f    func(*testing.T)
}

// moreCases are the cases of attacks.go and this file, run after Run's own.
func (c *suite) moreCases() []namedCase {
	var cs []namedCase
	for _, p := range probeCases {
		cs = append(cs, namedCase{p.name, func(t *testing.T) { c.runProbe(t, p) }})
	}
	cs = append(cs, namedCase{"HugeArgv", func(t *testing.T) {
		c.runProbe(t, probeCase{name: "HugeArgv", tries: "programs started with arguments and environments past the kernel's limits (10 MB of arguments, one of 200 KB, 13 MB of environment, 800,000 arguments)",
			stops: "the kernel's exec limits (E2BIG), within the sandbox's memory", code: bigArgvCode})
	}})
	return append(cs,
		namedCase{"IPCNamespace", c.ipcNamespace},
		namedCase{"SharedUIDLimits", c.sharedUIDLimits},
		namedCase{"AbstractSocketToNeighbour", c.abstractToNeighbour},
		namedCase{"LoopbackToNeighbour", c.loopbackToNeighbour},
		namedCase{"HostEnvironment", c.hostEnvironment},
		namedCase{"FilesPathTraversal", c.filesTraversal},
		namedCase{"FilesSymlinks", c.filesSymlinks},
		namedCase{"FilesSymlinkRace", c.filesSymlinkRace},
		namedCase{"FilesOddNames", c.filesOddNames},
		namedCase{"WatchAbuse", c.watchAbuse},
		namedCase{"AgentFromInside", c.agentFromInside},
		namedCase{"AllowlistHelperKilled", c.allowlistHelperKilled},
	)
}

// background starts code as a detached Python process in sb that runs for
// at most hold, and waits until it printed "ready" into its log.
func background(t *testing.T, sb *sandboxes.Sandbox, name, code string, hold time.Duration) {
	t.Helper()
	script := fmt.Sprintf("import subprocess, sys, time\nopen('/tmp/%[1]s.py', 'w').write(%[2]s)\nsubprocess.Popen([sys.executable, '/tmp/%[1]s.py'], stdout=open('/tmp/%[1]s.log', 'w'), stderr=subprocess.STDOUT, start_new_session=True)\n"+
		"for _ in range(600):\n    if 'ready' in open('/tmp/%[1]s.log').read():\n        break\n    time.sleep(0.05)\nprint(open('/tmp/%[1]s.log').read())",
		name, pyStr("import time\n"+code+fmt.Sprintf("\nprint('ready', flush=True)\ntime.sleep(%d)\n", int(hold.Seconds()))))
	ex := py(t, sb, script)
	if !strings.Contains(ex.Stdout(), "ready") {
		t.Fatalf("background %s did not start: %q %v", name, ex.Stdout(), ex.Error)
	}
}

func (c *suite) ipcNamespace(t *testing.T) {
	// The victim makes System V objects and a POSIX queue under fixed keys
	// and names; the neighbour looks for them.
	ex := py(t, c.victim, `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
KEY = 0x0c5c0001
print(libc.shmget(KEY, 4096, 0o1666) >= 0, libc.msgget(KEY, 0o1666) >= 0, libc.semget(KEY, 1, 0o1666) >= 0)
try:
    import posix_ipc
except ImportError:
    pass
rt = ctypes.CDLL('librt.so.1', use_errno=True) if os.path.exists('/usr/lib/x86_64-linux-gnu/librt.so.1') or os.path.exists('/lib/x86_64-linux-gnu/librt.so.1') else libc
rt.mq_open.restype = ctypes.c_int
print(rt.mq_open(b'/cs-hostile', 0o100 | 0o2, 0o666, None) >= 0)`)
	if strings.Count(out(ex), "True") < 3 {
		t.Fatalf("the victim could not make its IPC objects (the probe proves nothing): %q %v", ex.Stdout(), ex.Error)
	}
	ex = py(t, c.neighbour, `import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
KEY = 0x0c5c0001
for name, fn in (('shm', lambda: libc.shmget(KEY, 0, 0)), ('msg', lambda: libc.msgget(KEY, 0)), ('sem', lambda: libc.semget(KEY, 0, 0))):
    r = fn()
    print(name, 'FOUND' if r >= 0 else 'absent-' + errno.errorcode.get(ctypes.get_errno(), '?'))
for f in ('/proc/sysvipc/shm', '/proc/sysvipc/msg', '/proc/sysvipc/sem'):
    if not os.path.exists(f):
        print(f, 'absent-nofile')  # gVisor has no /proc/sysvipc
        continue
    rows = open(f).read().strip().splitlines()[1:]
    print(f, 'FOUND' if any(int(r.split()[0]) == KEY for r in rows) else 'absent')
rt = ctypes.CDLL('librt.so.1', use_errno=True) if os.path.exists('/usr/lib/x86_64-linux-gnu/librt.so.1') or os.path.exists('/lib/x86_64-linux-gnu/librt.so.1') else libc
rt.mq_open.restype = ctypes.c_int
print('mq', 'FOUND' if rt.mq_open(b'/cs-hostile', 0o2) >= 0 else 'absent-' + errno.errorcode.get(ctypes.get_errno(), '?'))
print('mqueue-fs', 'FOUND' if os.path.exists('/dev/mqueue/cs-hostile') else 'absent')`)
	if strings.Contains(ex.Stdout(), "FOUND") || ex.Error != nil {
		t.Errorf("the victim's IPC objects are visible to the neighbour: %s %v", ex.Stdout(), ex.Error)
	}
	record(t, "System V shm/msg/sem and a POSIX queue made in one sandbox: none visible in the other (%s)", strings.ReplaceAll(out(ex), "\n", ", "))
}

func (c *suite) sharedUIDLimits(t *testing.T) {
	if c.o.UserSpaceKernel {
		// The count is the host kernel's per-user one; each gVisor sandbox
		// has a Sentry of its own, which doesn't bound inotify instances,
		// so there is neither a shared count to exhaust nor a probe that
		// can fail.
		t.Skip("under a user-space kernel each sandbox has its own kernel (the Sentry, which doesn't count inotify instances per user): no per-user count shared with another sandbox")
	}
	// The victim holds every inotify instance its user may have; the
	// neighbour, a different sandbox, must still get one.
	background(t, c.victim, "cs-inotify", `import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 100000 and libc.inotify_init1(0o2000000) >= 0:
    fds.append(1)
print('held', len(fds), flush=True)`, 60*time.Second)
	defer py(t, c.victim, "import subprocess; subprocess.run(['pkill', '-f', '/tmp/cs-inotify.py'])")
	ex := py(t, c.victim, "import ctypes; l = ctypes.CDLL(None, use_errno=True); print(l.inotify_init1(0), open('/tmp/cs-inotify.log').read().split())")
	if !strings.HasPrefix(out(ex), "-1") {
		t.Fatalf("the victim's user still makes inotify instances while the holder runs (the probe proves nothing): %q", out(ex))
	}
	held := out(ex)
	ex = py(t, c.neighbour, "import ctypes, errno; l = ctypes.CDLL(None, use_errno=True); r = l.inotify_init1(0); print(r, errno.errorcode.get(ctypes.get_errno(), '') if r < 0 else 'ok')")
	if strings.HasPrefix(out(ex), "-1") {
		t.Errorf("BUG: one sandbox exhausted a per-user kernel count (inotify instances) for another: they share a host uid: neighbour got %q (victim: %s)", out(ex), held)
	}
	record(t, "victim holds every inotify instance of its user (%s); the neighbour still makes one (%s): no per-user count shared", held, out(ex))
}

func (c *suite) abstractToNeighbour(t *testing.T) {
	name := "cs-hostile-nb-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	background(t, c.victim, "cs-abstract", `import socket
s = socket.socket(socket.AF_UNIX)
s.bind('\0`+name+`'); s.listen(8)`, 30*time.Second)
	// The listener answers in its own sandbox (the probe can fail).
	ex := py(t, c.victim, "import socket; s = socket.socket(socket.AF_UNIX); s.settimeout(3); s.connect('\\0"+name+"'); print('connected')")
	if out(ex) != "connected" {
		t.Fatalf("the abstract listener does not answer in its own sandbox: %q %v", ex.Stdout(), ex.Error)
	}
	ex = py(t, c.neighbour, "import socket, errno\ns = socket.socket(socket.AF_UNIX); s.settimeout(3)\ntry:\n    s.connect('\\0"+name+"'); print('CONNECTED')\nexcept OSError as e:\n    print('refused', errno.errorcode.get(e.errno, e))")
	if !strings.HasPrefix(out(ex), "refused") {
		t.Errorf("the neighbour reaches the victim's abstract socket: %q %v", ex.Stdout(), ex.Error)
	}
	record(t, "an abstract socket of one sandbox: %s from the other", out(ex))
}

func (c *suite) loopbackToNeighbour(t *testing.T) {
	background(t, c.victim, "cs-loopback", `import socket
ss = []
for fam, addr in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):
    try:
        s = socket.socket(fam); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, 47123)); s.listen(8); ss.append(s)
    except OSError as e:
        print('no', addr, e)`, 30*time.Second)
	ex := py(t, c.victim, "import socket; s = socket.create_connection(('127.0.0.1', 47123), timeout=3); print('connected')")
	if out(ex) != "connected" {
		t.Fatalf("the loopback listener does not answer in its own sandbox: %q %v", ex.Stdout(), ex.Error)
	}
	ex = py(t, c.neighbour, `import socket, errno
for addr in ('127.0.0.1', '::1', 'localhost'):
    try:
        socket.create_connection((addr, 47123), timeout=3); print(addr, 'CONNECTED')
    except OSError as e:
        print(addr, 'refused', errno.errorcode.get(e.errno, e))`)
	if strings.Contains(ex.Stdout(), "CONNECTED") || ex.Error != nil {
		t.Errorf("the neighbour reaches the victim's loopback listener: %s %v", ex.Stdout(), ex.Error)
	}
	record(t, "a loopback listener of one sandbox from the other: %s", strings.ReplaceAll(out(ex), "\n", ", "))
}

func (c *suite) hostEnvironment(t *testing.T) {
	// A secret in the creating process's environment (as a host's cloud
	// credentials or tokens would be), then a sandbox: nothing of it, nor
	// of the host's usual variables, inside.
	secret := "host-env-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Setenv("CS_HOSTILE_HOST_SECRET", secret)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	sb := c.create(t, nil)
	ex := py(t, sb, `import os
secret = `+pyStr(secret)+`
hits = [k for k, v in os.environ.items() if secret in v]
for p in [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        if secret.encode() in open('/proc/%s/environ' % p, 'rb').read():
            hits.append('/proc/%s/environ' % p)
    except OSError:
        pass
# CODE_SANDBOXES_TOOLS_SOCKET is ours, not the host's: the agent sets it in
# every kernel (code mode, docs/agent-protocol.md). Only that exact name.
host = sorted(k for k in os.environ if k.startswith(('AWS_', 'CS_HOSTILE', 'KUBERNETES_', 'DOCKER_', 'CODE_SANDBOXES', 'SSH_', 'GITHUB_', 'CI', 'GOOGLE_', 'AZURE_', 'XDG_RUNTIME', 'SUDO_')) and k != 'CODE_SANDBOXES_TOOLS_SOCKET')
print('hits', hits)
print('host-vars', host)
print('env', sorted(os.environ))`)
	s := ex.Stdout()
	if !strings.Contains(s, "hits []") || !strings.Contains(s, "host-vars []") || ex.Error != nil {
		t.Errorf("the host's environment reaches the sandbox: %s %v", s, ex.Error)
	}
	record(t, "a secret in the creator's environment (and AWS_SECRET_ACCESS_KEY) absent from every process's environment inside; %s", lastLine(s))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return firstLine(s)
}

func fctx(t *testing.T) context.Context { return ctxT(t, 30*time.Second) }

// filesTraversal: the files API with paths that climb out of the user's
// directories or name the agent's and the host's files.
func (c *suite) filesTraversal(t *testing.T) {
	f := c.victim.Files()
	hostSecret := []byte(c.hostSecret)
	var refused, harmless []string
	for _, p := range []string{"../../../../../etc/shadow", "/home/user/../../etc/shadow", "/etc/shadow", "/proc/1/environ", "/proc/1/mem",
		"/run/code-sandboxes/agent.sock", "/run/code-sandboxes/config.json", "//proc//1//environ", "/proc/self/../1/environ",
		"/home/user/%2e%2e/%2e%2e/etc/shadow", c.hostSecretPath, "/root/.ssh/id_rsa", "/var/run/secrets/kubernetes.io/serviceaccount/token"} {
		if p == "" {
			continue
		}
		b, err := f.ReadBytes(fctx(t), p)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("read %s hangs", p)
		case err != nil:
			refused = append(refused, p)
		case c.o.SameHost && len(hostSecret) > 0 && bytes.Contains(b, hostSecret):
			t.Errorf("read %s through the files API: the host's secret", p)
		case strings.Contains(p, "/proc/1/") || strings.Contains(p, "shadow") || strings.Contains(p, "agent.sock") || strings.Contains(p, "config.json") || strings.Contains(p, "serviceaccount"):
			t.Errorf("read %s through the files API: %d bytes (%.60q)", p, len(b), b)
		default:
			harmless = append(harmless, p)
		}
	}
	// Writes, directories, renames and removals outside the writable
	// mounts; and the other operations on the agent's files.
	var wrote, created []string
	// The agent's socket and the cgroup file exist only where the variant
	// has them (docker, kubernetes). Where they do not (the local variant
	// has no /run or /sys), its root is the sandbox's own writable tmpfs
	// and a write there creates a new file of the sandbox's, which changes
	// nothing of the agent or the host: what matters is that an existing
	// socket or cgroup file is not written, and that what was created is
	// a regular file on the root's own tmpfs (checked below).
	existed := map[string]bool{}
	for _, p := range []string{"/run/code-sandboxes/agent.sock", "/sys/fs/cgroup/cgroup.procs"} {
		ok, err := f.Exists(fctx(t), p)
		existed[p] = ok || err != nil
	}
	for _, p := range []string{"../../../../../etc/evil", "/home/user/../../usr/evil", "/etc/passwd", "/proc/1/oom_score_adj", "/proc/self/oom_score_adj",
		"/proc/sys/kernel/core_pattern", "/run/code-sandboxes/agent.sock", "/usr/local/libexec/code-sandboxes-agent", "/sys/fs/cgroup/cgroup.procs"} {
		if err := f.WriteBytes(fctx(t), p, []byte("1\n")); err == nil {
			if e, known := existed[p]; known && !e {
				created = append(created, p)
				continue
			}
			wrote = append(wrote, p)
		}
	}
	if len(created) > 0 {
		defer func() {
			for _, p := range created {
				_ = f.Remove(fctx(t), p)
			}
		}()
		ex := py(t, c.victim, `import os, stat
root = None
for l in open('/proc/self/mountinfo'):
    a, b = l.split(' - ', 1)
    if a.split()[4] == '/':
        root = b.split()[0]
rdev = os.stat('/').st_dev
for p in `+pyList(created)+`:
    st = os.lstat(p)
    print(p, 'own-file' if root == 'tmpfs' and stat.S_ISREG(st.st_mode) and st.st_dev == rdev and open(p, 'rb').read() == b'1\n' else 'NOT-OWN mode %o dev %d root %s' % (st.st_mode, st.st_dev, root))
`)
		for _, l := range strings.Split(out(ex), "\n") {
			if !strings.HasSuffix(l, " own-file") {
				t.Errorf("the files API wrote a path that did not exist before, and it is not a new file on the sandbox's own root tmpfs: %q %v", l, ex.Error)
			}
		}
	}
	if _, err := f.MakeDir(fctx(t), "/etc/evil-dir"); err == nil {
		wrote = append(wrote, "mkdir /etc/evil-dir")
	}
	if _, err := f.Rename(fctx(t), "/etc/passwd", "/home/user/passwd"); err == nil {
		wrote = append(wrote, "rename /etc/passwd")
	}
	if err := f.Remove(fctx(t), "/etc/hostname"); err == nil {
		wrote = append(wrote, "remove /etc/hostname")
	}
	// (Remove of a path that does not exist succeeds: only one that
	// exists proves anything.)
	if existed["/run/code-sandboxes/agent.sock"] {
		if err := f.Remove(fctx(t), "/run/code-sandboxes/agent.sock"); err == nil {
			wrote = append(wrote, "remove the agent's socket")
		}
	}
	if len(wrote) > 0 {
		t.Errorf("the files API changed files outside the sandbox user's: %v", wrote)
	}
	if _, err := f.List(fctx(t), "/proc/1/fd", 1); err == nil {
		t.Errorf("the files API lists the agent's descriptors (/proc/1/fd)")
	}
	alive(t, c.victim, "files API traversal")
	own := ""
	if len(created) > 0 {
		own = fmt.Sprintf(" (%d absent here, created as new files of the sandbox's own root tmpfs: %s)", len(created), strings.Join(created, " "))
	}
	record(t, "%d reads refused, %d harmless (%s); %d writes/mkdir/rename/remove outside refused%s; /proc/1/fd not listed", len(refused), len(harmless), strings.Join(harmless, " "), 14-len(created), own)
}

// filesSymlinks: user code plants symlinks to what only the agent may
// read or write (its own /proc entries, its standard streams: a log on
// the host side for the local variant) and asks the files API, which the
// agent serves, to follow them: the agent as a confused deputy.
func (c *suite) filesSymlinks(t *testing.T) {
	sb := c.create(t, nil)
	var secrets []string
	if c.o.Secrets != nil {
		secrets = c.o.Secrets(t, sb)
	}
	ex := py(t, sb, `import os
links = {'self-environ': '/proc/self/environ', 'one-environ': '/proc/1/environ', 'self-mem': '/proc/self/mem', 'self-cmdline': '/proc/self/cmdline',
         'self-stdout': '/proc/self/fd/1', 'self-stderr': '/proc/self/fd/2', 'one-stderr': '/proc/1/fd/2', 'self-fd3': '/proc/self/fd/3',
         'self-root-shadow': '/proc/self/root/etc/shadow', 'self-cwd': '/proc/self/cwd', 'self-maps': '/proc/self/maps', 'self-auxv': '/proc/self/auxv',
         'self-oom': '/proc/self/oom_score_adj', 'self-attr': '/proc/self/attr/current', 'self-setgroups': '/proc/self/setgroups', 'run': '/run/code-sandboxes'}
for k, v in links.items():
    os.symlink(v, '/home/user/' + k)
print(len(links))`)
	if out(ex) != "16" {
		t.Fatalf("plant: %q %v", ex.Stdout(), ex.Error)
	}
	readPaths := []string{"self-environ", "one-environ", "self-mem", "self-cmdline", "self-stdout", "self-stderr", "one-stderr", "self-fd3", "self-root-shadow", "self-maps", "self-auxv", "run/agent.sock", "run/config.json"}
	var read []string
	for _, n := range readPaths {
		b, err := sb.Files().ReadBytes(fctx(t), "/home/user/"+n)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("read through %s hangs", n)
			continue
		}
		if err != nil {
			continue
		}
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("BUG: the files API read the sandbox's access token through a symlink to %s", n)
			}
		}
		read = append(read, fmt.Sprintf("%s(%d B)", n, len(b)))
	}
	// What the agent would read for user code that user code can't read
	// itself: its own /proc entries.
	for _, r := range read {
		n := r[:strings.IndexByte(r, '(')]
		if c.o.UserSpaceKernel && (n == "self-environ" || n == "self-cmdline" || n == "self-maps" || n == "self-auxv") {
			// Under gVisor user code reads these of the agent itself
			// (SECURITY.md, Isolation gvisor, known gap): the files API
			// serving them gives it nothing more; the token check above holds.
			continue
		}
		if strings.HasPrefix(r, "self-") && !strings.HasPrefix(r, "self-root-shadow") {
			t.Errorf("BUG: the files API follows a symlink into the agent's own /proc entries (user code can't read the agent's): %s", r)
		}
	}
	var wrote []string
	for _, n := range []string{"self-stdout", "self-stderr", "one-stderr", "self-oom", "self-attr", "self-setgroups", "self-fd3", "self-mem"} {
		if err := sb.Files().WriteBytes(fctx(t), "/home/user/"+n, []byte("hostile write through "+n+"\n")); err == nil {
			wrote = append(wrote, n)
		}
	}
	if len(wrote) > 0 {
		t.Errorf("BUG: the files API wrote through symlinks into the agent's own descriptors or /proc entries (its stdout/stderr are a file on the host side for the local variant): %v", wrote)
	}
	alive(t, sb, "files API through symlinks")
	record(t, "16 symlinks to the agent's /proc entries and streams: reads served only for %v (no token), writes refused for all 8", read)
}

// filesSymlinkRace: a process in the sandbox flips a path between a
// regular file and a symlink to the agent's /proc entries while the host
// reads and writes it through the files API: whatever wins a race, no
// token comes out and nothing lands in the agent's streams.
func (c *suite) filesSymlinkRace(t *testing.T) {
	sb := c.create(t, nil)
	var secrets []string
	if c.o.Secrets != nil {
		secrets = c.o.Secrets(t, sb)
	}
	background(t, sb, "cs-flip", `import os
open('/home/user/plain', 'w').write('plain file\n')
targets = ['/proc/self/environ', '/proc/self/fd/2', '/proc/1/environ', '/proc/self/mem', '/home/user/plain']
import threading
def flip():
    i = 0
    while True:
        t = targets[i % len(targets)]; i += 1
        try:
            os.symlink(t, '/home/user/race.tmp'); os.replace('/home/user/race.tmp', '/home/user/race')
            open('/home/user/race.tmp', 'w').write('regular\n'); os.replace('/home/user/race.tmp', '/home/user/race')
        except OSError:
            pass
threading.Thread(target=flip, daemon=True).start()`, 60*time.Second)
	defer py(t, sb, "import subprocess; subprocess.run(['pkill', '-f', '/tmp/cs-flip.py'])")
	// Under gVisor user code reads the agent's environ itself (SECURITY.md,
	// Isolation gvisor, known gap): the files API serving exactly those
	// bytes gives it nothing more.
	var agentEnv []byte
	if c.o.UserSpaceKernel {
		ex := py(t, sb, "print(open('/proc/1/environ', 'rb').read().hex())")
		if _, err := fmt.Sscanf(out(ex), "%x", &agentEnv); err != nil || len(agentEnv) == 0 {
			t.Fatalf("under a user-space kernel user code was expected to read the agent's environ: %q %v", ex.Stdout(), ex.Error)
		}
	}
	var reads, readOK, writes, writeOK atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(5 * time.Second)
	var mu sync.Mutex
	var bad []string
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				if w%2 == 0 {
					b, err := sb.Files().ReadBytes(ctx, "/home/user/race")
					reads.Add(1)
					if err == nil {
						readOK.Add(1)
						for _, s := range secrets {
							if bytes.Contains(b, []byte(s)) {
								mu.Lock()
								bad = append(bad, "read the token")
								mu.Unlock()
							}
						}
						// Our own files, possibly torn (a read racing an
						// in-place upload or the flipper's writes): only the
						// bytes of what we and the flipper write, at most
						// 11 of them. Anything else came from elsewhere.
						if agentEnv != nil && bytes.Equal(b, agentEnv) {
							// (gVisor: what user code reads itself.)
						} else if len(b) > 11 || strings.Trim(string(b), "regulapin fRACE-WIT\n") != "" {
							mu.Lock()
							bad = append(bad, fmt.Sprintf("read %d bytes of something else: %.40q", len(b), b))
							mu.Unlock()
						}
					} else if errors.Is(err, context.DeadlineExceeded) {
						mu.Lock()
						bad = append(bad, "a read hangs")
						mu.Unlock()
					}
				} else {
					err := sb.Files().WriteBytes(ctx, "/home/user/race", []byte("RACE-WRITE\n"))
					writes.Add(1)
					if err == nil {
						writeOK.Add(1)
					}
				}
				cancel()
			}
		}(w)
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("BUG: racing the files API against a symlink flipper: %v", bad[:min(len(bad), 5)])
	}
	// Where writes that won the race went: never into the agent's stderr
	// (the sandbox's own files only).
	ex := py(t, sb, "import os; print(sorted(os.listdir('/home/user')))")
	alive(t, sb, "the symlink race")
	record(t, "%d reads (%d served: only the sandbox's own files), %d writes (%d landed, in the sandbox's own files) against a symlink flipper; %s", reads.Load(), readOK.Load(), writes.Load(), writeOK.Load(), out(ex))
}

// filesOddNames: names with NUL, newlines, control and bidi characters,
// invalid UTF-8, over-long components and paths, through the files API
// and in listings of what user code made.
func (c *suite) filesOddNames(t *testing.T) {
	sb := c.create(t, nil)
	f := sb.Files()
	var outcomes []string
	for _, p := range []string{"/home/user/a\x00b", "/home/user/line\nbreak", "/home/user/\u202etxt.exe", "/home/user/\xff\xfe", "/home/user/" + strings.Repeat("n", 300),
		"/home/user/" + strings.Repeat("d/", 3000) + "x", "/home/user/.", "/home/user/..", "", " ", "/home/user/\r\n\x1b[31mred", "/home/user/%00", "/home/user/?x=1#y"} {
		err := f.WriteBytes(fctx(t), p, []byte("x"))
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("write %q hangs", p)
		}
		_, rerr := f.ReadBytes(fctx(t), p)
		_, serr := f.Stat(fctx(t), p)
		if strings.Contains(p, "\x00") && (err == nil || rerr == nil) {
			t.Errorf("a name with NUL was accepted: write %v read %v", err, rerr)
		}
		outcomes = append(outcomes, fmt.Sprintf("%.12q:%v/%v/%v", p, err == nil, rerr == nil, serr == nil))
	}
	ex := py(t, sb, `import os
d = b'/home/user/odd'
os.makedirs(d, exist_ok=True)
for n in (b'\xff\xfe', b'new\nline', b'\x1b]52;c;ZXZpbA==\x07', b'\xe2\x80\xae', b'a' * 255, b'sp ace', b'-rf', b'..."'):
    open(os.path.join(d, n), 'w').write('x')
print(len(os.listdir(d)))`)
	if out(ex) != "8" {
		t.Fatalf("plant: %q %v", ex.Stdout(), ex.Error)
	}
	ents, err := f.List(fctx(t), "/home/user/odd", 1)
	if err != nil {
		t.Errorf("listing a directory of odd names: %v", err)
	}
	for _, e := range ents {
		if strings.ContainsAny(e.Name, "/\x00") {
			t.Errorf("a listed name holds a separator or NUL: %q", e.Name)
		}
	}
	alive(t, sb, "odd names")
	record(t, "13 odd paths through write/read/stat (%s); 8 odd names listed: %d entries", strings.Join(outcomes, " "), len(ents))
}

// watchAbuse: watches on what is not the sandbox user's, and a flood of
// events on one that is.
func (c *suite) watchAbuse(t *testing.T) {
	sb := c.create(t, nil)
	f := sb.Files()
	var refused []string
	for _, d := range []string{"/proc/1/fd", "/proc/1", "/run/code-sandboxes", "../../../", "/home/user/../../etc", "/home/user/nonexistent"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		wait, err := f.Watch(ctx, d, true, func(sandboxes.FileEvent) {})
		if err == nil {
			cancel()
			_ = wait()
			refused = append(refused, d+":watched")
		} else {
			cancel()
			refused = append(refused, d+":refused")
		}
	}
	if err := f.WriteBytes(fctx(t), "/home/user/flood/.keep", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var events atomic.Int64
	wait, err := f.Watch(ctx, "/home/user/flood", true, func(sandboxes.FileEvent) { events.Add(1) })
	if err != nil {
		cancel()
		t.Fatalf("watch: %v", err)
	}
	ex := py(t, sb, `import os
for i in range(20000):
    p = '/home/user/flood/f%d' % i
    open(p, 'w').close(); os.remove(p)
for i in range(200):
    os.makedirs('/home/user/flood/' + '/'.join('d%d' % j for j in range(i % 40 + 1)), exist_ok=True)
print('flooded')`, sandboxes.WithTimeout(2*time.Minute))
	if out(ex) != "flooded" {
		t.Errorf("flood: %q %v", ex.Stdout(), ex.Error)
	}
	alive(t, sb, "a watch flood")
	cancel()
	_ = wait()
	alive(t, sb, "ending a flooded watch")
	record(t, "watches: %s; a flood of 40,000+ events on a watched directory: %d delivered, agent answers", strings.Join(refused, " "), events.Load())
}

// agentFromInside: whatever port the agent listens on that user code can
// reach (the kubernetes variant's agent listens in the pod's network
// namespace): wrong tokens, a huge header, a slowloris of many
// connections; the host side must keep being served meanwhile.
func (c *suite) agentFromInside(t *testing.T) {
	sb := c.create(t, nil)
	background(t, sb, "cs-agentattack", `import socket, os, struct, time, threading
ports = set()
for f in ('/proc/net/tcp', '/proc/net/tcp6'):
    for l in open(f).readlines()[1:]:
        x = l.split()
        if x[3] == '0A':
            ports.add(int(x[1].rsplit(':', 1)[1], 16))
print('ports', sorted(ports), flush=True)
res = {}
def req(port, data, timeout=5):
    s = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    s.sendall(data)
    try:
        return s.recv(200)
    finally:
        s.close()
for p in sorted(ports):
    codes = []
    for i in range(50):
        tok = os.urandom(12).hex()
        try:
            r = req(p, b'POST /execute HTTP/1.1\r\nHost: x\r\nX-Access-Token: ' + tok.encode() + b'\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{"code":"1 + 1"}')
            codes.append(r.split(b' ')[1].decode() if r.startswith(b'HTTP') else 'raw')
        except OSError as e:
            codes.append('err')
    print('port', p, 'wrong tokens', sorted(set(codes)), flush=True)
    try:
        r = req(p, b'GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ' + b'a' * (2 << 20) + b'\r\n\r\n')
        print('port', p, 'big header', r[:12].decode(errors='replace').replace(' ', '_') or 'closed', flush=True)
    except OSError as e:
        print('port', p, 'big header closed', flush=True)
slow = []
for p in sorted(ports):
    for i in range(200):
        try:
            s = socket.create_connection(('127.0.0.1', p), timeout=5)
            s.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\n')
            slow.append(s)
        except OSError:
            break
print('slowloris', len(slow), flush=True)`, 45*time.Second)
	// While the slowloris connections are open: the host side is served.
	alive(t, sb, "a slowloris from inside")
	ex := py(t, sb, "print(open('/tmp/cs-agentattack.log').read())")
	s := ex.Stdout()
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "wrong tokens") && (strings.Contains(l, "'200'") || strings.Contains(l, "'2")) {
			t.Errorf("BUG: a request with a wrong token was served: %s", l)
		}
		// 2 MiB of header: past the agent's bound (1 MiB), refused (431)
		// or cut, never served.
		if strings.Contains(l, "big header HTTP/1.1_2") {
			t.Errorf("BUG: a 2 MiB header was served: %s", l)
		}
	}
	record(t, "%s", strings.ReplaceAll(strings.TrimSpace(s), "\n", "; "))
}
