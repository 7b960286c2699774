// Attacks on what lies outside the sandbox: host files, the neighbour, secrets, writes outside, planted non-regular files.

package hostile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

func (c *suite) readHostFiles(t *testing.T) {
	paths := []string{"/root", "/var/log", "/run", "/srv", "/opt", "/mnt", "/var/lib", "/proc/1/root/root", "/sys/fs/cgroup/memory", "/etc/shadow", "/etc/gshadow", "/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_rsa_key"}
	if c.o.SameHost {
		paths = append(paths, c.hostSecretPath, filepath.Dir(c.hostSecretPath))
		if wd, err := os.Getwd(); err == nil {
			paths = append(paths, filepath.Join(wd, "hostile.go"), wd)
		}
	}
	code := "import os\npaths = " + pyList(paths) + `
for p in paths:
    try:
        if os.path.isdir(p):
            os.listdir(p); print(p, "LISTED")
        else:
            open(p, "rb").read(16); print(p, "READ")
    except OSError as e:
        print(p, "blocked", type(e).__name__)
`
	ex := py(t, c.victim, code)
	blocked := 0
	for _, l := range strings.Split(out(ex), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[1] {
		case "blocked":
			blocked++
		case "LISTED":
			// An empty sandbox-owned directory (/run, /mnt…) is fine when
			// it is not the host's: check it holds nothing of the host.
			if !c.sandboxOwnedEmpty(t, f[0]) {
				t.Errorf("host directory visible: %s", l)
			}
		default:
			t.Errorf("host file readable: %s", l)
		}
	}
	// The host secret's bytes anywhere in the sandbox's file system.
	if c.o.SameHost {
		ex = py(t, c.victim, "import subprocess\nr = subprocess.run(['grep','-rlsF','--devices=skip','-D','skip',"+pyStr(c.hostSecret)+",'/home','/tmp','/files','/etc','/var','/dev','/run','/mnt','/opt','/srv'], capture_output=True, text=True, timeout=60)\nprint(r.stdout)", sandboxes.WithTimeout(90*time.Second))
		if strings.TrimSpace(ex.Stdout()) != "" {
			t.Errorf("the host's secret is readable inside: %s", ex.Stdout())
		}
	}
	if ex.Error != nil {
		t.Errorf("probe failed: %v", ex.Error)
	}
	record(t, "%d/%d host paths refused or absent; host secret not found by grep -r", blocked, len(paths))
}

// sandboxOwnedEmpty: an existing directory the sandbox created for itself
// (empty: the host's /run, /mnt have content).
func (c *suite) sandboxOwnedEmpty(t *testing.T, p string) bool {
	ex := py(t, c.victim, "import os; print(len(os.listdir("+pyStr(p)+")))")
	return out(ex) == "0"
}

func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = pyStr(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func (c *suite) readNeighbour(t *testing.T) {
	// The neighbour's files, environment and processes, by every path a
	// shared kernel offers: the file system, /proc, abstract sockets.
	ex := py(t, c.victim, `import os, subprocess
r = subprocess.run(['grep','-rlsF','--devices=skip','-D','skip',`+pyStr(c.nbSecret)+`,'/home','/tmp','/files','/dev/shm','/var/tmp'], capture_output=True, text=True, timeout=60)
print("files:", r.stdout.strip() or "none")
pids = [p for p in os.listdir('/proc') if p.isdigit()]
found = []
for p in pids:
    for f in ('environ', 'cmdline'):
        try:
            if `+pyStr(c.nbSecret)+`.encode() in open('/proc/%s/%s' % (p, f), 'rb').read():
                found.append(p + '/' + f)
        except OSError:
            pass
print("proc:", found or "none")
print("npids:", len(pids))
print("abstract:", len([l for l in open('/proc/net/unix') if '@' in l]))
`, sandboxes.WithTimeout(90*time.Second))
	s := ex.Stdout()
	if !strings.Contains(s, "files: none") || !strings.Contains(s, "proc: none") {
		t.Fatalf("the neighbour's secret is readable: %s %v", s, ex.Error)
	}
	var npids int
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "npids:") {
			npids, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, "npids:")))
		}
	}
	if npids > 40 {
		t.Errorf("the sandbox sees %d processes: not its own pid namespace?", npids)
	}
	record(t, "neighbour's secret not found in files, /proc/*/environ or cmdline; %d pids visible (own namespace)", npids)
}

func (c *suite) secrets(t *testing.T) {
	if c.o.Secrets == nil {
		t.Skip("the variant gives no host-side secrets to look for")
	}
	var secrets []string
	secrets = append(secrets, c.o.Secrets(t, c.victim)...)
	secrets = append(secrets, c.o.Secrets(t, c.neighbour)...)
	// Files, /proc of every process (environ, cmdline) and the agent's
	// memory through /proc/1/mem (needs ptrace access: must be refused).
	code := `import os, re
secrets = ` + pyList(secrets) + `
hits = []
for p in [p for p in os.listdir('/proc') if p.isdigit()]:
    for f in ('environ', 'cmdline'):
        try:
            b = open('/proc/%s/%s' % (p, f), 'rb').read()
        except OSError:
            continue
        for s in secrets:
            if s.encode() in b:
                hits.append('/proc/%s/%s' % (p, f))
def scan_mem(pid):
    try:
        maps = open('/proc/%d/maps' % pid).read().splitlines()
        mem = open('/proc/%d/mem' % pid, 'rb', 0)
    except OSError as e:
        return 'blocked ' + type(e).__name__
    n = 0
    for l in maps:
        a, perm = l.split()[0], l.split()[1]
        if 'r' not in perm:
            continue
        lo, hi = [int(x, 16) for x in a.split('-')]
        if hi - lo > 256 << 20:
            continue
        try:
            mem.seek(lo); b = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        n += len(b)
        for s in secrets:
            if s.encode() in b:
                hits.append('/proc/%d/mem' % pid)
    return 'read %d bytes' % n
print('agent memory:', scan_mem(1))
print('hits:', sorted(set(hits)) or 'none')
`
	ex := py(t, c.victim, code, sandboxes.WithTimeout(90*time.Second))
	s := ex.Stdout()
	if !strings.Contains(s, "hits: none") {
		t.Errorf("BUG: a host-side secret (the agent's access token) is readable from inside the sandbox: %s", s)
	}
	if ex.Error != nil {
		t.Errorf("probe: %v", ex.Error)
	}
	record(t, "%s", strings.ReplaceAll(strings.TrimSpace(s), "\n", "; "))
}

func (c *suite) writeOutside(t *testing.T) {
	code := `import os
targets = ['/usr/evil', '/etc/evil', '/bin/evil', '/lib/evil', '/var/evil', '/proc/evil', '/sys/evil', '/etc/passwd', '/etc/hosts', '/usr/bin/python3', '/proc/1/root/usr/evil', '/root/evil', '/run/evil', '/mnt/evil']
# A writable root directory is the sandbox's own bounded tmpfs (the local
# variant's; Docker's is the image, read-only): a write that lands there
# (/var/evil where the host's /var is not bound) is the sandbox's, not a
# write outside.
rootdev = os.stat('/').st_dev if os.access('/', os.W_OK) else None
for p in targets:
    try:
        with open(p, 'ab') as f:
            f.write(b'x')
        if os.stat(p).st_dev == rootdev and not os.path.islink(os.path.dirname(p)):
            os.remove(p); print(p, 'root-own')
        else:
            print(p, 'WROTE')
    except OSError as e:
        print(p, 'blocked', type(e).__name__)
# The agent's own stdout and stderr (a log on the host side) through /proc.
for fd in (1, 2):
    p = '/proc/1/fd/%d' % fd
    try:
        with open(p, 'ab') as f:
            f.write(b'hostile write through ' + p.encode() + b'\n')
        print(p, 'WROTE', os.readlink(p))
    except OSError as e:
        print(p, 'blocked', type(e).__name__)
for p in ('/home/user/ok', '/tmp/ok', '/files/ok'):
    open(p, 'w').write('ok'); os.remove(p); print(p, 'allowed')
# The root directory itself: the local variant's is a bounded tmpfs of the
# sandbox's own (mkdir /x works as on E2B), Docker's the image, read-only.
for p in ('/evil', '/evil-dir/'):
    try:
        if p.endswith('/'):
            os.mkdir(p); os.rmdir(p)
        else:
            open(p, 'w').write('x'); os.remove(p)
        print(p, 'root-own')
    except OSError as e:
        print(p, 'root-refused', type(e).__name__)
`
	ex := py(t, c.victim, code)
	wrote, blocked, allowed, rootDir := 0, 0, 0, []string(nil)
	for _, l := range strings.Split(out(ex), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[1] {
		case "WROTE":
			wrote++
			if f[0] == "/proc/1/fd/1" || f[0] == "/proc/1/fd/2" {
				t.Errorf("BUG: user code writes to the agent's stdout/stderr, a file on the host (the sandbox's agent.log, not bounded by any tmpfs): %s", l)
			} else {
				t.Errorf("wrote outside the writable mounts: %s", l)
			}
		case "blocked":
			blocked++
		case "allowed":
			allowed++
		case "root-own", "root-refused":
			rootDir = append(rootDir, f[0]+" "+f[1])
		}
	}
	if allowed != 3 {
		t.Errorf("the writable mounts are not writable: %s %v", ex.Stdout(), ex.Error)
	}
	// /dev is the sandbox's own 64 KiB tmpfs and /dev/shm its 64 MiB one
	// (both counted in the sandbox's memory): writable by design, reported.
	ex = py(t, c.victim, "import os\nfor p in ('/dev/x', '/dev/shm/x'):\n    try:\n        open(p, 'w').write('x'); os.remove(p); print(p, 'writable')\n    except OSError as e:\n        print(p, 'refused')")
	record(t, "%d writes outside /home/user, /tmp, /files refused, %d succeeded; 3/3 writable mounts usable; sandbox-private tmpfs: %s; on the root directory's own tmpfs: %s", blocked, wrote, strings.ReplaceAll(out(ex), "\n", ", "), strings.Join(rootDir, ", "))
}

// nonRegularFiles: a FIFO, a socket or a device planted where the caller
// reads a file is refused at once (opening a FIFO for reading blocks until
// a writer comes: the download hung), and the sandbox keeps answering.
func (c *suite) nonRegularFiles(t *testing.T) {
	sb := c.create(t, nil)
	ex := py(t, sb, `import os, socket
os.mkfifo('/home/user/fifo')
s = socket.socket(socket.AF_UNIX); s.bind('/home/user/sock'); s.listen(1)
os.symlink('/dev/zero', '/home/user/zero')
keep = s
print('planted')`)
	if out(ex) != "planted" {
		t.Fatalf("plant: %q %v", ex.Stdout(), ex.Error)
	}
	var parts []string
	for _, p := range []string{"/home/user/fifo", "/home/user/sock", "/home/user/zero", "/dev/null", "/proc/self/fd/0"} {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b, err := sb.Files().ReadBytes(ctx, p)
		cancel()
		d := time.Since(start)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("read %s hangs (30 s)", p)
		}
		if err == nil {
			t.Errorf("read %s: got %d bytes, want a refusal", p, len(b))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s refused in %s", p, d.Round(time.Millisecond)))
	}
	alive(t, sb, "reading non-regular files")
	record(t, "%s (%s)", strings.Join(parts, ", "), "not a regular file")
}
