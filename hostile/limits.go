// Exhaustion against the sandbox's limits: file descriptors, disk, inodes, memory, pids, CPU, lifetime.

package hostile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

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
