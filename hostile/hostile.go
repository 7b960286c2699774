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
