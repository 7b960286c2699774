// Package hostile is the hostile-code suite: code that tries to escape,
// escalate, exhaust or confuse a sandbox, written once and run against every
// variant (like sandboxestest). Each case asserts what was contained, that
// the host and a neighbouring sandbox are unaffected, and that the sandbox
// either keeps answering or is reported dead with a clear reason; every wait
// is bounded.
//
// A variant's test calls Run with a Config that selects it:
//
//	hostile.Run(t, cfg, hostile.Options{SameHost: true, Limits: true})
package hostile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// Options tune the suite to a variant.
type Options struct {
	// SameHost: the sandbox runs on this machine (local, or our serve), so
	// host-side effects (files, loopback listeners, abstract sockets) are
	// planted and checked.
	SameHost bool
	// Limits: the variant enforces Config.Memory, CPU and Pids.
	Limits bool
	// Networks are the network policies (all, allowlist) to attack, each
	// in a sandbox of its own against the test's own internet
	// (internal/testnet: needs root on this machine).
	Networks []string
	// Secrets returns strings only the host side may know about sb (its
	// access token): they must be readable nowhere inside any sandbox.
	Secrets func(t *testing.T, sb *sandboxes.Sandbox) []string
	// Gone is called after a case ended a sandbox: it must confirm, within a
	// bounded time, that nothing of it lingers on the host (processes,
	// cgroups, records). Nil skips that check.
	Gone func(t *testing.T, id string)
	// Created is called with every sandbox the suite creates (a variant's
	// test can note host-side facts, such as pids, for Gone).
	Created func(t *testing.T, sb *sandboxes.Sandbox)
	// UserSpaceKernel: the sandbox's kernel is gVisor's Sentry, not the
	// host's. What differs, and is accepted as contained: nice and
	// oom_score_adj are the Sentry's own values (no effect on the host);
	// tmpfs has no inode limit (empty files are Sentry memory, under the
	// sandbox's memory limit); the host's memory limit ends the whole
	// sandbox (the Sentry), not one kernel; code can kill the agent (the
	// Sentry doesn't shield PID 1 from its namespace's signals), which ends
	// only its own sandbox, reported dead and cleaned up; CPU use is
	// measured on the host (HostCPU), the Sentry's rusage being its own;
	// the Sentry's own emulated devices (fuse, tun), ENOTTY for network
	// ioctls, no core_pattern or /proc/sysvipc, its exec limits, and its
	// gap on the agent's non-dumpable flag (SECURITY.md, Isolation gvisor).
	UserSpaceKernel bool
	// AgentOwnUID: the agent keeps what it must from the sandbox's code
	// under a uid of its own (local and docker under gVisor): under a
	// user-space kernel its descriptors are probed rather than skipped.
	AgentOwnUID bool
	// HostCPU returns the CPU time sb's processes used so far, measured on
	// the host (its cgroup); nil = measured inside (getrusage).
	HostCPU func(t *testing.T, sb *sandboxes.Sandbox) time.Duration
	// NetworkHelper returns the host process that carries a networked
	// sandbox's traffic (its egress stack), which AllowlistHelperKilled
	// kills; nil: the variant has none (its egress is the cluster's).
	NetworkHelper func(t *testing.T, sb *sandboxes.Sandbox) int
	// Skip names cases not to run (a variant that cannot do them), each with
	// its reason; they are skipped, never silently passed.
	Skip map[string]string
}

// Result is one case's outcome, for SECURITY.md's table.
type Result struct {
	Case, Outcome string
}

var (
	resMu   sync.Mutex
	results []Result
)

// Results returns what Run recorded so far (case and measured outcome).
func Results() []Result {
	resMu.Lock()
	defer resMu.Unlock()
	return append([]Result(nil), results...)
}

func record(t *testing.T, format string, a ...any) {
	t.Helper()
	s := fmt.Sprintf(format, a...)
	resMu.Lock()
	results = append(results, Result{Case: t.Name(), Outcome: s})
	resMu.Unlock()
	t.Logf("RESULT %s: %s", t.Name(), s)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// py runs code with a bounded wait and fails on infrastructure errors.
func py(t *testing.T, sb *sandboxes.Sandbox, code string, opts ...sandboxes.RunOption) *sandboxes.Execution {
	t.Helper()
	ex, err := sb.RunCode(ctxT(t, 2*time.Minute), code, opts...)
	if err != nil {
		t.Fatalf("RunCode(%.60q): %v", code, err)
	}
	return ex
}

func out(ex *sandboxes.Execution) string { return strings.TrimSpace(ex.Stdout()) }

// alive asserts the sandbox still runs code and keeps its state.
func alive(t *testing.T, sb *sandboxes.Sandbox, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := sb.RunCode(ctx, "6 * 7")
	if err != nil || ex.Text() != "42" {
		var e any
		if ex != nil {
			e = ex.Error
		}
		t.Fatalf("sandbox stopped answering after %s: %v %v", what, err, e)
	}
}

// answersOrDead: after a case that may end the sandbox, it either still
// answers, or it is reported dead with ErrUnavailable/ErrNotFound (not a
// hang, not an opaque error) and nothing of it lingers. It reports which.
func answersOrDead(t *testing.T, sb *sandboxes.Sandbox, o Options) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		ex, err := sb.RunCode(ctx, "6 * 7")
		cancel()
		switch {
		case err == nil && ex.Text() == "42":
			return "answers"
		case err == nil && ex.Error != nil && ex.Error.Name == "KernelDied":
			// The kernel went with the signal; the next run gets a fresh one.
		case errors.Is(err, sandboxes.ErrUnavailable) || errors.Is(err, sandboxes.ErrNotFound):
			if o.Gone != nil {
				o.Gone(t, sb.ID())
			}
			return "dead: " + firstLine(err.Error())
		case err != nil && errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("sandbox hangs: RunCode did not return within 15s")
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox neither answers nor is reported dead: %v %+v", err, ex)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func (c *suite) create(t *testing.T, mod func(*sandboxes.Config)) *sandboxes.Sandbox {
	t.Helper()
	sb := create(t, c.cfg, mod)
	if c.o.Created != nil {
		c.o.Created(t, sb)
	}
	return sb
}

func create(t *testing.T, cfg sandboxes.Config, mod func(*sandboxes.Config)) *sandboxes.Sandbox {
	t.Helper()
	if mod != nil {
		mod(&cfg)
	}
	sb, err := sandboxes.Create(ctxT(t, 2*time.Minute), cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

func pyStr(s string) string { return strconv.Quote(s) }

// Run runs the hostile-code suite on the variant cfg selects.
// An empty NetworkPolicy is set to none: variants differ in their default
// (E2B's is internet access), and the suite checks containment.
func Run(t *testing.T, cfg sandboxes.Config, o Options) {
	if cfg.NetworkPolicy == "" {
		cfg.NetworkPolicy = sandboxes.NetworkNone
	}
	// The victim runs most attacks; the neighbour holds secrets that must stay
	// out of the victim's reach and must be unaffected by everything.
	victim := create(t, cfg, nil)
	neighbour := create(t, cfg, nil)
	if o.Created != nil {
		o.Created(t, victim)
		o.Created(t, neighbour)
	}
	nbSecret := "nb-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	py(t, neighbour, "open('/home/user/neighbour.txt','w').write("+pyStr(nbSecret)+")\nopen('/tmp/neighbour.txt','w').write("+pyStr(nbSecret)+")\nnb_state = 'kept'\nimport os; os.environ['NB_SECRET'] = "+pyStr(nbSecret))

	var hostSecret, hostSecretPath string
	if o.SameHost {
		hostSecret = "host-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		hostSecretPath = filepath.Join(t.TempDir(), "host-secret.txt")
		if err := os.WriteFile(hostSecretPath, []byte(hostSecret), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	skip := func(t *testing.T) {
		if why, ok := o.Skip[strings.TrimPrefix(t.Name(), t.Name()[:strings.LastIndexByte(t.Name(), '/')+1])]; ok {
			t.Skip(why)
		}
	}
	c := &suite{cfg: cfg, o: o, victim: victim, neighbour: neighbour, nbSecret: nbSecret, hostSecret: hostSecret, hostSecretPath: hostSecretPath}
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"ReadHostFiles", c.readHostFiles},
		{"ReadNeighbour", c.readNeighbour},
		{"Secrets", c.secrets},
		{"WriteOutside", c.writeOutside},
		{"NetworkNone", c.networkNone},
		{"NetworkAll", c.networkAll},
		{"NetworkAllowlist", c.networkAllowlist},
		{"Escalation", c.escalation},
		{"SetuidBinaries", c.setuidBinaries},
		{"WriteProcSys", c.writeProcSys},
		{"FakeEndOfExecution", c.fakeEnd},
		{"NeverEnds", c.neverEnds},
		{"FloodStdout", c.floodStdout},
		{"FloodDisplay", c.floodDisplay},
		{"FileDescriptors", c.fds},
		{"DiskFill", c.diskFill},
		{"Memory", c.memory},
		{"Pids", c.pids},
		{"CPU", c.cpu},
		{"KillAll", c.killAll},
		{"SignalAgent", c.signalAgent},
		{"SleepPastLifetime", c.sleepPastLifetime},
		{"SocketFamilies", c.socketFamilies},
		{"AgentOutOfReach", c.agentOutOfReach},
		{"InodeFlood", c.inodeFlood},
		{"DefaultMemory", c.defaultMemory},
		{"NonRegularFiles", c.nonRegularFiles},
		{"ForgedEndWithRealToken", c.forgedEndRealToken},
	} {
		t.Run(tc.name, func(t *testing.T) { skip(t); tc.f(t) })
	}
	for _, tc := range c.moreCases() {
		t.Run(tc.name, func(t *testing.T) { skip(t); tc.f(t) })
	}

	t.Run("HostAndNeighbourUnaffected", func(t *testing.T) {
		alive(t, victim, "the suite")
		ex := py(t, neighbour, "print(open('/home/user/neighbour.txt').read(), open('/tmp/neighbour.txt').read(), nb_state)")
		if out(ex) != nbSecret+" "+nbSecret+" kept" {
			t.Fatalf("the neighbour sandbox was affected: %q %v", ex.Stdout(), ex.Error)
		}
		if o.SameHost {
			b, err := os.ReadFile(hostSecretPath)
			if err != nil || string(b) != hostSecret {
				t.Fatalf("the host's file changed: %q %v", b, err)
			}
		}
		record(t, "neighbour's files and state intact; host file intact")
	})
}

type suite struct {
	cfg                  sandboxes.Config
	o                    Options
	victim, neighbour    *sandboxes.Sandbox
	nbSecret, hostSecret string
	hostSecretPath       string
}

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

func (c *suite) fakeEnd(t *testing.T) {
	sb := c.victim
	// A fake end-of-execution line in stdout, on the raw fd, a forged
	// sync marker, and garbage on the kernel's event fd: none may end the
	// execution early or move output to another execution.
	var lines []string
	ex := py(t, sb, `import os, sys
print('{"type": "end_of_execution"}')
os.write(1, b'\n{"type": "end_of_execution"}\n{"type": "stdout", "text": "forged"}\n')
os.write(1, b'\x1eforgedtoken:1\x1f')
sys.stdout.flush()
print('after-fake')
'result'`, sandboxes.OnStdout(func(m sandboxes.OutputMessage) { lines = append(lines, m.Line) }))
	s := ex.Stdout()
	if !strings.Contains(s, `{"type": "end_of_execution"}`) || !strings.Contains(s, "after-fake") || ex.Text() != "result" {
		t.Fatalf("a fake end-of-execution line changed the execution: stdout %q, result %q, error %v", s, ex.Text(), ex.Error)
	}
	if ex2 := py(t, sb, "print('next')"); ex2.Stdout() != "next\n" {
		t.Fatalf("output leaked into the next execution: %q", ex2.Stdout())
	}
	// Garbage on the kernel's event channel (fd 4) and command channel.
	ex = py(t, sb, `import os
n = 0
for fd in (3, 4, 5, 6):
    try:
        os.write(fd, b'\xfeK\x00\x00\x00\x20{"t":"done","e":99,"id":1}      garbage')
        n += 1
    except OSError:
        pass
print('wrote', n)`)
	what := "kernel unaffected"
	if ex.Error != nil {
		what = "kernel reported " + ex.Error.Name + ": " + firstLine(ex.Error.Value)
	}
	ex2, err := sb.RunCode(ctxT(t, 30*time.Second), "print('clean')")
	if err != nil || ex2.Stdout() != "clean\n" {
		t.Fatalf("after forging kernel frames: %v %+v", err, ex2)
	}
	record(t, "fake NDJSON end lines and forged markers came back as plain stdout; forged kernel frames: %s; next execution clean", what)
}

func (c *suite) neverEnds(t *testing.T) {
	sb := c.victim
	start := time.Now()
	ex := py(t, sb, "while True: pass", sandboxes.WithTimeout(2*time.Second))
	d1 := time.Since(start)
	if !ex.TimedOut || d1 > 20*time.Second {
		t.Fatalf("busy loop with a 2s timeout: timed out %v after %s (%v)", ex.TimedOut, d1, ex.Error)
	}
	// Ignores SIGINT: the kernel must be killed, and reported.
	start = time.Now()
	ex = py(t, sb, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    try:\n        pass\n    except BaseException:\n        pass", sandboxes.WithTimeout(2*time.Second))
	d2 := time.Since(start)
	if !ex.TimedOut || d2 > 30*time.Second {
		t.Fatalf("SIGINT-proof loop: timed out %v after %s (%v)", ex.TimedOut, d2, ex.Error)
	}
	alive(t, sb, "a SIGINT-proof loop")
	// The caller gives up (context deadline): RunCode returns, the sandbox
	// interrupts the orphaned execution and answers the next one.
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := sb.RunCode(ctx, "import time\ntime.sleep(10**9)")
	cancel()
	d3 := time.Since(start)
	if err == nil || d3 > 10*time.Second {
		t.Fatalf("RunCode under a 2s context deadline returned %v after %s", err, d3)
	}
	start = time.Now()
	alive(t, sb, "an abandoned execution")
	d4 := time.Since(start)
	record(t, "busy loop stopped in %s, SIGINT-proof loop killed in %s, abandoned sleep returned in %s and the next execution ran %s later", d1.Round(time.Millisecond), d2.Round(time.Millisecond), d3.Round(time.Millisecond), d4.Round(time.Millisecond))
}

func (c *suite) floodStdout(t *testing.T) {
	sb := c.victim
	start := time.Now()
	ex := py(t, sb, "import sys\nchunk = 'x' * 1023 + '\\n'\nfor i in range(200 * 1024):\n    sys.stdout.write(chunk)", sandboxes.WithTimeout(2*time.Minute))
	d := time.Since(start)
	got := len(ex.Stdout())
	if got > 20<<20 || !strings.Contains(ex.Stdout()+ex.Stderr(), "truncated") {
		t.Fatalf("200 MiB of stdout: client kept %d bytes, truncation marker %v", got, strings.Contains(ex.Stdout()+ex.Stderr(), "truncated"))
	}
	// fd-level flood from a child process.
	start2 := time.Now()
	ex2 := py(t, sb, "import os\nos.system('head -c 300000000 /dev/zero | tr \"\\\\0\" y')", sandboxes.WithTimeout(2*time.Minute))
	d2 := time.Since(start2)
	if len(ex2.Stdout()) > 20<<20 {
		t.Fatalf("fd-level flood: client kept %d bytes", len(ex2.Stdout()))
	}
	alive(t, sb, "a stdout flood")
	record(t, "200 MiB of print: %d MiB kept + marker, %s; 300 MB from a child: %d MiB kept, %s", got>>20, d.Round(time.Millisecond), len(ex2.Stdout())>>20, d2.Round(time.Millisecond))
}

func (c *suite) floodDisplay(t *testing.T) {
	sb := c.victim
	start := time.Now()
	ex := py(t, sb, `class Big:
    def _repr_html_(self): return 'h' * (40 << 20)
display(Big())
class Mid:
    def _repr_html_(self): return 'm' * (1 << 20)
for i in range(64):
    display(Mid())
'done'`, sandboxes.WithTimeout(2*time.Minute))
	d := time.Since(start)
	total := 0
	for _, r := range ex.Results {
		total += len(r.HTML())
		if len(r.HTML()) > 32<<20 {
			t.Fatalf("a 40 MiB display payload came through (%d bytes)", len(r.HTML()))
		}
	}
	if ex.Text() != "done" {
		t.Errorf("display flood lost the main result: %q %v", ex.Text(), ex.Error)
	}
	alive(t, sb, "a display flood")
	record(t, "40 MiB display dropped; 64 x 1 MiB displays: %d results, %d MiB total, %s", len(ex.Results), total>>20, d.Round(time.Millisecond))
}

func (c *suite) fds(t *testing.T) {
	ex := py(t, c.victim, `import os, resource
fds = []
try:
    while True:
        fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e:
    err = type(e).__name__
n = len(fds)
for f in fds:
    os.close(f)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20)); raised = 'RAISED'
except (ValueError, OSError) as e:
    raised = 'refused'
print(n, err, raised, resource.getrlimit(resource.RLIMIT_NOFILE)[1])`)
	var n, hard int
	var errName, raised string
	if _, err := fmt.Sscan(out(ex), &n, &errName, &raised, &hard); err != nil || n > 4096 || raised != "refused" {
		t.Fatalf("fd exhaustion: %q (%v)", ex.Stdout(), ex.Error)
	}
	alive(t, c.victim, "fd exhaustion")
	record(t, "opened %d fds then %s; raising RLIMIT_NOFILE %s (hard limit %d)", n, errName, raised, hard)
}

func (c *suite) diskFill(t *testing.T) {
	sb := c.victim
	// A 10 GiB file into each writable tmpfs: ENOSPC/EFBIG quickly, then the
	// space is given back and the sandbox works.
	start := time.Now()
	ex := py(t, sb, `import os, time
chunk = b'\0' * (8 << 20)
for d in ('/tmp', '/home/user', '/files', '/dev/shm'):
    p = d + '/big.bin'
    t0 = time.time(); n = 0; err = 'none'
    try:
        with open(p, 'wb') as f:
            while n < (10 << 30):
                f.write(chunk); n += len(chunk)
            f.flush(); os.fsync(f.fileno())
    except OSError as e:
        err = __import__('errno').errorcode.get(e.errno, str(e.errno))
    size = os.path.getsize(p) if os.path.exists(p) else 0
    os.remove(p)
    print(d, size >> 20, err, round(time.time() - t0, 2))
`, sandboxes.WithTimeout(2*time.Minute))
	d := time.Since(start)
	var parts []string
	for _, l := range strings.Split(out(ex), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			continue
		}
		mib, _ := strconv.Atoi(f[1])
		// Each mount's size: /dev/shm 64 MiB, the others at most 1 GiB
		// (less under a memory limit); the write ends in ENOSPC or EFBIG.
		limit := 1024
		if f[0] == "/dev/shm" {
			limit = 64
		}
		if (f[2] != "ENOSPC" && f[2] != "EFBIG") || mib > limit {
			t.Errorf("10 GiB into %s: wrote %d MiB (its size is at most %d MiB), error %s", f[0], mib, limit, f[2])
		}
		parts = append(parts, fmt.Sprintf("%s stopped at %d MiB (%s, %ss)", f[0], mib, f[2], f[3]))
	}
	if len(parts) != 4 {
		t.Fatalf("disk fill probe: %q %v", ex.Stdout(), ex.Error)
	}
	alive(t, sb, "filling the disk")
	record(t, "10 GiB writes: %s; total %s", strings.Join(parts, "; "), d.Round(time.Millisecond))
}

func (c *suite) memory(t *testing.T) {
	if !c.o.Limits {
		t.Skip("the variant does not enforce Memory")
	}
	sb := c.create(t, func(cfg *sandboxes.Config) { cfg.Memory = 256 << 20 })
	start := time.Now()
	if c.o.UserSpaceKernel {
		c.wholeSandboxBomb(t, sb, "b = []\nwhile True: b.append(bytearray(32 << 20))", "256 MiB limit")
		return
	}
	ex := py(t, sb, "b = []\nwhile True: b.append(bytearray(32 << 20))", sandboxes.WithTimeout(time.Minute))
	d := time.Since(start)
	if ex.Error == nil {
		t.Fatal("memory bomb not stopped")
	}
	// tmpfs pages count against the memory limit too: filling /tmp (512
	// MiB by default) under a 256 MiB limit must not get past the limit.
	// /tmp is sized at half the limit (128 MiB) so the fill ends in ENOSPC;
	// were it bigger, the memory limit would end the kernel instead.
	ex2 := py(t, sb, `import os
n = 0
try:
    with open('/tmp/m', 'wb') as f:
        while n < 1024:
            f.write(b'\0' * (8 << 20)); n += 8
    print(n, 'none')
except OSError as e:
    print(n, __import__('errno').errorcode.get(e.errno, str(e.errno)))
os.remove('/tmp/m')`, sandboxes.WithTimeout(time.Minute))
	how := out(ex2)
	var filled int
	var ferr string
	fmt.Sscan(how, &filled, &ferr)
	switch {
	case ex2.Error != nil && ex2.Error.Name == "KernelDied":
		how = "the kernel was killed (KernelDied)"
	case ex2.Error != nil:
		t.Errorf("tmpfs fill under a 256 MiB limit: %s: %s", ex2.Error.Name, ex2.Error.Value)
	case filled > 256 || ferr == "none" || ferr == "":
		t.Errorf("tmpfs fill under a 256 MiB limit: wrote %d MiB into /tmp (%q)", filled, how)
	default:
		how = fmt.Sprintf("/tmp stopped at %d MiB (%s)", filled, ferr)
	}
	alive(t, sb, "a memory bomb")
	record(t, "256 MiB limit: bomb ended as %s (%s) after %s; tmpfs fill under the limit: %s; sandbox answers", ex.Error.Name, firstLine(ex.Error.Value), d.Round(time.Millisecond), how)
}

// wholeSandboxBomb: under a user-space kernel a memory bomb may end the
// kernel (KernelDied) or the whole sandbox, which must then be reported
// dead and leave nothing behind; the host's memory stays bounded either way.
func (c *suite) wholeSandboxBomb(t *testing.T, sb *sandboxes.Sandbox, code, what string) {
	start := time.Now()
	ex, err := sb.RunCode(ctxT(t, 2*time.Minute), code, sandboxes.WithTimeout(time.Minute))
	d := time.Since(start).Round(time.Millisecond)
	switch {
	case err == nil && ex.Error == nil:
		t.Fatal("memory bomb not stopped")
	case err == nil:
		alive(t, sb, "a memory bomb")
		record(t, "%s: bomb ended as %s after %s; sandbox answers", what, ex.Error.Name, d)
	default:
		record(t, "%s: bomb ended the whole sandbox after %s (%s)", what, d, answersOrDead(t, sb, c.o))
	}
}

func (c *suite) pids(t *testing.T) {
	if !c.o.Limits {
		t.Skip("the variant does not enforce Pids")
	}
	sb := c.create(t, func(cfg *sandboxes.Config) { cfg.Pids = 64; cfg.CPU = 0.5 })
	start := time.Now()
	// A real fork bomb, bounded by a timeout: it must stay inside the
	// pids limit and leave the agent and the kernel working (under a
	// user-space kernel the host's pids limit on its tasks may end the
	// whole sandbox instead: reported dead, nothing left).
	const bomb = `import os, time, subprocess
p = subprocess.Popen(['bash', '-c', 'b(){ b | b & }; b'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(3)
n = len([d for d in os.listdir('/proc') if d.isdigit()])
print(n)`
	var ex *sandboxes.Execution
	if c.o.UserSpaceKernel {
		var err error
		if ex, err = sb.RunCode(ctxT(t, 2*time.Minute), bomb, sandboxes.WithTimeout(30*time.Second)); err != nil {
			record(t, "pids 64: the fork bomb ended the whole sandbox (%s)", answersOrDead(t, sb, c.o))
			return
		}
	} else {
		ex = py(t, sb, bomb, sandboxes.WithTimeout(30*time.Second))
	}
	var n int
	fmt.Sscan(out(ex), &n)
	if n > 64 || n == 0 {
		t.Errorf("fork bomb under pids 64: %d processes (%q %v)", n, ex.Stdout(), ex.Error)
	}
	// The bomb still runs: the sandbox must still answer, and Close must
	// end it all (checked by the runtime-dir check at exit).
	alive(t, sb, "a fork bomb")
	kill, err := sb.Commands().Run(ctxT(t, 30*time.Second), "pkill -9 bash; sleep 1; ls /proc | grep -c '^[0-9]'")
	left := "?"
	if err == nil {
		left = strings.TrimSpace(kill.Stdout)
	}
	record(t, "pids 64: fork bomb peaked at %d processes in 3s; agent and kernel answer; after pkill %s processes (%s)", n, left, time.Since(start).Round(time.Millisecond))
}

func (c *suite) cpu(t *testing.T) {
	if !c.o.Limits {
		t.Skip("the variant does not enforce CPU")
	}
	sb := c.create(t, func(cfg *sandboxes.Config) { cfg.CPU = 0.5 })
	var before time.Duration
	if c.o.HostCPU != nil {
		before = c.o.HostCPU(t, sb)
	}
	// Two busy processes for 3 s of wall time: under a 0.5 CPU quota they
	// get about 1.5 s of CPU between them, not 6.
	ex := py(t, sb, `import os, time, resource
pids = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        end = time.time() + 3
        while time.time() < end:
            pass
        os._exit(0)
    pids.append(pid)
for p in pids:
    os.waitpid(p, 0)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(round(r.ru_utime + r.ru_stime, 2))`, sandboxes.WithTimeout(30*time.Second))
	var used float64
	if _, err := fmt.Sscan(out(ex), &used); err != nil {
		t.Fatalf("cpu probe: %q %v", ex.Stdout(), ex.Error)
	}
	if c.o.HostCPU != nil {
		used = (c.o.HostCPU(t, sb) - before).Seconds()
	}
	if used > 2.4 {
		t.Errorf("CPU 0.5: two burners used %.2fs of CPU in 3s (want about 1.5)", used)
	}
	record(t, "CPU 0.5: two burners for 3s wall used %.2fs CPU (unlimited would be up to 6s)", used)
}

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

func (c *suite) sleepPastLifetime(t *testing.T) {
	sb := c.create(t, func(cfg *sandboxes.Config) { cfg.MaxLifetime = 3 * time.Second })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	ex, err := sb.RunCode(ctx, "import time\nprint('sleeping', flush=True)\ntime.sleep(3600)")
	d := time.Since(start)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a sleep past a 3s lifetime: RunCode hung until the caller's deadline (%s)", d)
	}
	if err == nil {
		// The execution was cut by the sandbox's end: that must be visible,
		// as an error of the execution, never as a silent success.
		var e *sandboxes.ExecutionError
		if ex != nil {
			e = ex.Error
		}
		if e == nil {
			t.Fatalf("BUG: a sleep past a 3s lifetime: RunCode returned success (no error, no Execution.Error, stdout %q) after %s; the sandbox's end is silent", ex.Stdout(), d)
		}
		err = fmt.Errorf("execution error %s: %s", e.Name, e.Value)
	}
	if d > 20*time.Second {
		t.Errorf("the sandbox ended %s after start (lifetime 3s)", d)
	}
	if o := c.o.Gone; o != nil {
		o(t, sb.ID())
	}
	record(t, "3s lifetime, sleep(3600): RunCode ended after %s with %q", d.Round(time.Millisecond), firstLine(err.Error()))
}

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

// inodeFlood: empty files cost no tmpfs space, only kernel memory (200,000
// in /dev took 183 MiB): every writable tmpfs bounds its inode count.
func (c *suite) inodeFlood(t *testing.T) {
	sb := c.create(t, nil)
	ex := py(t, sb, `import os, errno
for d, cap in (('/dev', 20000), ('/dev/shm', 20000), ('/tmp', 150000)):
    sub = d + '/flood'
    try:
        os.mkdir(sub)
    except OSError as e:
        print(d, 0, 'mkdir-' + errno.errorcode.get(e.errno, str(e.errno))); continue
    n, err = 0, 'none'
    try:
        while n < cap:
            os.close(os.open('%s/%d' % (sub, n), os.O_CREAT | os.O_WRONLY, 0o600)); n += 1
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
    for i in range(n):
        os.unlink('%s/%d' % (sub, i))
    os.rmdir(sub)
    print(d, n, err)
`, sandboxes.WithTimeout(3*time.Minute))
	var parts []string
	for _, l := range strings.Split(out(ex), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		if f[2] == "none" && c.o.UserSpaceKernel {
			f[2] = "none (gVisor's tmpfs: Sentry memory, under the memory limit)"
		} else if f[2] == "none" {
			t.Errorf("%s: %d empty files created without reaching a limit", f[0], n)
		}
		parts = append(parts, fmt.Sprintf("%s %d then %s", f[0], n, f[2]))
	}
	if len(parts) != 3 {
		t.Fatalf("inode flood probe: %q %v", ex.Stdout(), ex.Error)
	}
	alive(t, sb, "an inode flood")
	record(t, "empty files until refused: %s; sandbox answers", strings.Join(parts, ", "))
}

// defaultMemory: a sandbox created without Memory has the default limit
// (sandboxes.DefaultMemory), and a bomb under it ends the kernel
// (KernelDied), not the sandbox.
func (c *suite) defaultMemory(t *testing.T) {
	if !c.o.Limits {
		t.Skip("the variant does not enforce Memory")
	}
	sb := c.create(t, func(cfg *sandboxes.Config) { cfg.Memory = 0 })
	info, err := sb.Info(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if info.Memory != sandboxes.DefaultMemory {
		t.Fatalf("Config{} sandbox: memory limit %d, want the default %d (a bomb would take the host's memory)", info.Memory, int64(sandboxes.DefaultMemory))
	}
	start := time.Now()
	if c.o.UserSpaceKernel {
		c.wholeSandboxBomb(t, sb, "b = []\nwhile True: b.append(bytearray(64 << 20))", fmt.Sprintf("Config{}: %d MiB limit", info.Memory>>20))
		return
	}
	ex := py(t, sb, "b = []\nwhile True: b.append(bytearray(64 << 20))", sandboxes.WithTimeout(2*time.Minute))
	d := time.Since(start)
	if ex.Error == nil || ex.Error.Name != "KernelDied" {
		t.Fatalf("memory bomb under the default limit: %+v", ex.Error)
	}
	alive(t, sb, "a memory bomb under the default limit")
	record(t, "Config{}: %d MiB limit; bomb ended as %s (%s) after %s; sandbox answers", info.Memory>>20, ex.Error.Name, firstLine(ex.Error.Value), d.Round(time.Millisecond))
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

// forgedEndRealToken: user code runs in the kernel's process, so it can
// reach the kernel's own protocol (its token, its event fd, its send
// function) and forge anything about its own execution: a result, an
// early end. What it must not do is reach past it: the real rest of the
// cell (printed after the forged end) must not show up in the next
// execution, and another context must be unaffected. SECURITY.md says so.
func (c *suite) forgedEndRealToken(t *testing.T) {
	sb := c.create(t, nil)
	other, err := sb.CreateContext(ctxT(t, time.Minute), sandboxes.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ex := py(t, sb, "kept = 'other-state'", sandboxes.InContext(other)); ex.Error != nil {
		t.Fatal(ex.Error.Value)
	}
	ex := py(t, sb, `import sys, time
f = sys._getframe()
while f is not None and f.f_code.co_name != '_cmd_exec':
    f = f.f_back
cid, send, st = f.f_locals['cid'], f.f_globals['_send'], f.f_globals['_st']
print('token-len', len(st.token), flush=True)
send({"t": "display", "main": True, "data": {"text/plain": "'forged-result'"}, "md": {}})
send({"t": "done", "id": cid, "exit": 0})
time.sleep(0.5)
print('after-forged-done', flush=True)
'real-result'`)
	first := fmt.Sprintf("stdout %q, result %q, error %v", ex.Stdout(), ex.Text(), ex.Error)
	if !strings.Contains(ex.Stdout(), "token-len") {
		t.Fatalf("the probe did not reach the kernel's protocol: %s", first)
	}
	time.Sleep(time.Second)
	next, err := sb.RunCode(ctxT(t, time.Minute), "print('next')")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(next.Stdout(), "after-forged-done") || strings.Contains(next.Text(), "real-result") {
		t.Fatalf("the forged end moved the rest of a cell into the next execution: %q %q", next.Stdout(), next.Text())
	}
	nextWhat := "clean"
	if next.Error != nil {
		nextWhat = next.Error.Name
	} else if next.Stdout() != "next\n" {
		t.Fatalf("next execution: %q", next.Stdout())
	}
	o := py(t, sb, "print(kept)", sandboxes.InContext(other))
	if out(o) != "other-state" {
		t.Fatalf("the other context was affected: %q %v", o.Stdout(), o.Error)
	}
	alive(t, sb, "a forged end with the real token")
	record(t, "forged with the kernel's real token: the execution saw %s; the next execution: %s; another context unaffected", first, nextWhat)
}
