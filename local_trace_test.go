package sandboxes_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// TestLocalTraceTimeline: with CODE_SANDBOXES_TRACE every process of the
// start path marks its steps in the file, the sandbox's init and agent
// through an inherited fd; user code does not get that fd.
func TestLocalTraceTimeline(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	ctx, sb, path := tracedSandbox(t)
	ex, err := sb.RunCode(ctx, "import os\n[os.readlink('/proc/self/fd/' + f) for f in os.listdir('/proc/self/fd') if os.path.exists('/proc/self/fd/' + f)]")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ex.Text(), "cs-trace-file") {
		t.Fatalf("user code holds the trace file: %s", ex.Text())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), " stage 1: seccomp loaded, in place\n") && !strings.Contains(string(b), " stage 1: seccomp loaded, re-exec\n") {
		t.Errorf("no \"stage 1: seccomp loaded\" (in place or re-exec) in the trace:\n%s", b)
	}
	for _, step := range []string{"create: start", "shim: inits done", "stage 2: start", "agent: kernel start begun", "agent: reported ready", "agent: serving", "kernel: spawned", "create: healthy"} {
		if !strings.Contains(string(b), " "+step+"\n") {
			t.Errorf("no %q in the trace:\n%s", step, b)
		}
	}
}

// kernelFacts is what a kernel reports about its own process: everything
// user code could tell apart between a kernel the sandbox's stage 1
// started and one the agent started (pids and pipe inodes normalised).
const kernelFacts = `import os, json
def _facts():
    st = {}
    for line in open('/proc/self/status'):
        k, _, v = line.partition(':')
        if k in ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp', 'Seccomp_filters', 'Speculation_Store_Bypass'):
            st[k] = v.split()
    fds = {}
    for f in os.listdir('/proc/self/fd'):
        try:
            t = os.readlink('/proc/self/fd/' + f)
        except OSError:
            continue
        fds[f] = t.split(':')[0] if t.startswith(('pipe:', 'socket:', 'anon_inode:')) else t
    return json.dumps({
        'status': st, 'fds': fds, 'ppid': os.getppid(), 'pgid_is_pid': os.getpgid(0) == os.getpid(), 'sid': os.getsid(0),
        'env': dict(os.environ), 'cwd': os.getcwd(), 'limits': open('/proc/self/limits').read(),
        'cgroup': open('/proc/self/cgroup').read(), 'oom': open('/proc/self/oom_score_adj').read(),
        'ns': {n: os.readlink('/proc/self/ns/' + n) for n in sorted(os.listdir('/proc/self/ns'))},
        'umask': os.umask(0o22),
    }, sort_keys=True)
print(_facts())`

// TestLocalKernelStartedEarly: the default kernel is started by the
// sandbox's stage 1 (the default; CODE_SANDBOXES_EARLY_KERNEL=0 turns it
// off), before the re-exec into the agent (python's start-up
// overlaps the agent's), and is in every way user code can see the kernel
// the agent would have started: the same credentials, capabilities,
// no_new_privs, seccomp, fds, environment, cwd, limits, cgroup and
// namespaces as a second context's kernel, which the agent starts.
//
// Both ways stage 1 becomes the agent (local.ReexecEnv): hardened in
// place, and re-executing (the default, and the fallback where it can't
// change every thread).
func TestLocalKernelStartedEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	for _, reexec := range []bool{false, true} {
		name, mark := "in place", "stage 1: seccomp loaded, in place"
		if reexec {
			name, mark = "re-exec", "stage 1: seccomp loaded, re-exec"
		}
		t.Run(name, func(t *testing.T) {
			t.Setenv(local.ReexecEnv, map[bool]string{false: "0", true: "1"}[reexec])
			kernelStartedEarly(t, mark)
		})
	}
}

func kernelStartedEarly(t *testing.T, mark string) {
	t.Setenv(local.EarlyKernelEnv, "1")
	ctx, sb, path := tracedSandbox(t)
	first, err := sb.RunCode(ctx, kernelFacts)
	if err != nil {
		t.Fatal(err)
	}
	if first.Error != nil {
		t.Fatalf("default kernel: %+v", first.Error)
	}
	cc, err := sb.CreateContext(ctx, sandboxes.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	second, err := sb.RunCode(ctx, kernelFacts, sandboxes.InContext(cc))
	if err != nil {
		t.Fatal(err)
	}
	if first.Stdout() == "" || first.Stdout() != second.Stdout() {
		t.Errorf("the default kernel differs from one the agent starts:\ndefault: %s\nagent's: %s", first.Stdout(), second.Stdout())
	}
	if strings.Contains(first.Stdout(), "memfd") || strings.Contains(first.Stdout(), "cs-trace-file") {
		t.Errorf("the default kernel holds a descriptor of ours: %s", first.Stdout())
	}

	// Started in stage 1: its "spawned" mark comes before stage 2's start
	// (and the second context's kernel is the only other one).
	marks := map[string][]string{}
	var order []string
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 {
			continue
		}
		marks[f[2]] = append(marks[f[2]], f[1])
		order = append(order, f[2])
	}
	idx := func(step string) int {
		for i, s := range order {
			if s == step {
				return i
			}
		}
		t.Fatalf("no %q in the trace:\n%s", step, b)
		return -1
	}
	idx(mark)
	// Marks are appended in time order (O_APPEND, one write each).
	if k, s2 := idx("kernel: spawned"), idx("stage 2: start"); k > s2 {
		t.Errorf("the default kernel was spawned after stage 2 started:\n%s", b)
	}
	if got := len(marks["kernel: spawned"]); got != 2 {
		t.Errorf("%d kernels spawned, want 2 (the early one, the second context's):\n%s", got, b)
	}
}

// TestLocalKernelEarlyStartOff: CODE_SANDBOXES_EARLY_KERNEL=0 leaves the
// default kernel's start to the agent, after stage 2 began.
func TestLocalKernelEarlyStartOff(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	t.Setenv(local.EarlyKernelEnv, "0")
	ctx, sb, path := tracedSandbox(t)
	if ex, err := sb.RunCode(ctx, "1 + 1"); err != nil || ex.Text() != "2" {
		t.Fatalf("%v %+v", err, ex)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tr := string(b)
	k, s2 := strings.Index(tr, " kernel: spawned\n"), strings.Index(tr, " stage 2: start\n")
	if k < 0 || s2 < 0 || k < s2 || strings.Contains(tr, " stage 1: early start\n") {
		t.Errorf("with %s=0 the agent must start the kernel after stage 2 began:\n%s", local.EarlyKernelEnv, tr)
	}
}

// tracedSandbox creates a local sandbox while every process on its start
// path appends its trace to a file of the test's (returned as path); the
// sandbox is closed and tracing turned off when the test ends.
func tracedSandbox(t *testing.T) (context.Context, *sandboxes.Sandbox, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cs-trace-file")
	t.Setenv(trace.Env, path)
	trace.Reopen()
	t.Cleanup(func() {
		os.Unsetenv(trace.Env)
		trace.Reopen()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	sb, err := sandboxes.Create(ctx, localConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return ctx, sb, path
}
