package sandboxes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	_ "github.com/code-sandboxes/code-sandboxes/e2b" // registers the e2b variant (refusals tested here)
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// setLocal changes cfg's local options (the variant's own type, which
// Create takes as they are).
func setLocal(cfg *sandboxes.Config, f func(*local.Options)) {
	o, _ := cfg.Options.(local.Options)
	f(&o)
	cfg.Options = o
}

func localConfig(t *testing.T) sandboxes.Config {
	t.Helper()
	return sandboxes.Config{Variant: "local", Options: local.Options{RuntimeDir: runtimeDir(t)}}
}

var sharedRuntime string

// ownRuntimeDir is a runtime directory for one test's sandboxes alone,
// removed after it: a short path (the sandboxes' sockets live in it, and a
// t.TempDir path can be too long for one), named from prefix.
func ownRuntimeDir(t *testing.T, prefix string) string {
	t.Helper()
	rt, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(rt) })
	return rt
}

func runtimeDir(t *testing.T) string {
	if sharedRuntime == "" {
		d, err := os.MkdirTemp("", "cs-runtime-")
		if err != nil {
			t.Fatal(err)
		}
		sharedRuntime = d
	}
	return sharedRuntime
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedRuntime != "" {
		// Everything must have cleaned up after itself.
		ents, _ := os.ReadDir(sharedRuntime)
		if len(ents) != 0 {
			names := []string{}
			for _, e := range ents {
				names = append(names, e.Name())
			}
			println("sandboxes left behind in the runtime dir:", strings.Join(names, ", "))
			code = 1
		}
		os.RemoveAll(sharedRuntime)
	}
	os.Exit(code)
}

func hasRich() bool {
	return exec.Command("/usr/bin/python3", "-c", "import numpy, matplotlib, pandas").Run() == nil
}

func TestLocalConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sandboxestest.Require(t, hasRich(), "Debian's python3-numpy, python3-matplotlib and python3-pandas (make deps)")
	sandboxestest.Run(t, localConfig(t), sandboxestest.Options{Rich: true})
}

func newLocal(t *testing.T, mod func(*sandboxes.Config)) *sandboxes.Sandbox {
	t.Helper()
	cfg := localConfig(t)
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

func runOut(t *testing.T, sb *sandboxes.Sandbox, code string, opts ...sandboxes.RunOption) *sandboxes.Execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex, err := sb.RunCode(ctx, code, opts...)
	if err != nil {
		t.Fatalf("RunCode: %v", err)
	}
	return ex
}

func TestLocalIsolation(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	// A secret the sandbox must not see: in the caller's working tree, /root and /tmp.
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret.txt")
	if err := os.WriteFile(secret, []byte("top secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	cwd, _ := os.Getwd()
	sb := newLocal(t, nil)
	// /root exists when the sandbox has a root user (a root caller's): it is
	// root's home there, on the sandbox's own root tmpfs, with nothing of
	// the host's /root in it.
	if ex := runOut(t, sb, "import os, json\nprint(json.dumps(os.listdir('/root') if os.path.isdir('/root') else []))"); ex.Error == nil {
		var inside []string
		_ = json.Unmarshal([]byte(ex.Stdout()), &inside)
		if ents, err := os.ReadDir("/root"); err == nil {
			for _, e := range ents {
				if slices.Contains(inside, e.Name()) {
					t.Errorf("the host's /root/%s shows in the sandbox's /root", e.Name())
				}
			}
		}
	}
	for _, p := range []string{secret, filepath.Join(cwd, "go.mod"), "/root/.bashrc", "/home/" + os.Getenv("SUDO_USER") + "x", "/var/log", "/run/code-sandboxes"} {
		ex := runOut(t, sb, "import os\nprint(os.path.exists("+pyStr(p)+"))")
		if strings.TrimSpace(ex.Stdout()) != "False" {
			t.Errorf("sandbox sees host path %s: %q (error %v)", p, ex.Stdout(), ex.Error)
		}
	}
	if ex := runOut(t, sb, "import os; print(os.listdir('/home'))"); strings.TrimSpace(ex.Stdout()) != "['user']" {
		t.Errorf("/home holds more than the sandbox's user: %q", ex.Stdout())
	}
	for _, p := range []string{"/usr/evil", "/etc/evil", "/bin/evil"} {
		ex := runOut(t, sb, "open("+pyStr(p)+", 'w')")
		if ex.Error == nil {
			t.Errorf("sandbox wrote %s", p)
		}
	}
	ex := runOut(t, sb, `import socket
s = socket.socket(); s.settimeout(2)
try:
    s.connect(("1.1.1.1", 53)); print("connected")
except OSError as e:
    print("blocked", e.errno)`)
	if !strings.Contains(ex.Stdout(), "blocked") {
		t.Errorf("network none reached out: %q", ex.Stdout())
	}
	// A TCP server on the host's loopback is unreachable under "none".
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ex = runOut(t, sb, "import socket\ns = socket.socket(); s.settimeout(2)\ntry:\n    s.connect(('127.0.0.1', "+itoa(port)+")); print('connected')\nexcept OSError as e:\n    print('blocked')")
	if !strings.Contains(ex.Stdout(), "blocked") {
		t.Errorf("reached the host's loopback: %q", ex.Stdout())
	}
	ex = runOut(t, sb, `import os, ctypes
print(open('/proc/self/status').read())`)
	st := ex.Stdout()
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(st, want) {
			t.Errorf("/proc/self/status lacks %q", want)
		}
	}
	res, err := sb.Commands().Run(context.Background(), "unshare -U true; echo rc=$?; mount -t tmpfs x /tmp 2>&1; echo rc=$?; ps -e | wc -l")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout, "rc=0") {
		t.Errorf("escalation worked: %q", res.Stdout)
	}
	ex = runOut(t, sb, "import os; os.kill(1, 9)")
	if ex2 := runOut(t, sb, "1+1"); ex2.Text() != "2" {
		t.Errorf("killing PID 1 from inside took the agent down: %v %v", ex.Error, ex2.Error)
	}
}

func pyStr(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }
func itoa(i int) string     { return strconv.Itoa(i) }

func TestLocalLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sb := newLocal(t, func(c *sandboxes.Config) { c.Memory = 256 << 20; c.Pids = 64 })
	ex := runOut(t, sb, "b = []\nwhile True: b.append(bytearray(50 << 20))")
	if ex.Error == nil {
		t.Fatal("memory bomb was not stopped")
	}
	if !strings.Contains(strings.ToLower(ex.Error.Value+ex.Error.Name), "memory") {
		t.Errorf("memory bomb reported as %s: %s", ex.Error.Name, ex.Error.Value)
	}
	if ex := runOut(t, sb, "1 + 1"); ex.Text() != "2" {
		t.Fatalf("sandbox unusable after the memory bomb: %v", ex.Error)
	}
	ex = runOut(t, sb, `import subprocess
procs, err = [], None
for i in range(200):
    try:
        procs.append(subprocess.Popen(["sleep", "30"]))
    except OSError as e:
        err = e
        break
print(len(procs), type(err).__name__)
for p in procs:
    p.kill(); p.wait()`)
	var n int
	var errName string
	if _, err := fmt.Sscan(ex.Stdout(), &n, &errName); err != nil || n >= 64 || errName != "BlockingIOError" {
		t.Errorf("fork bomb under a pids limit of 64: %q (%v)", ex.Stdout(), ex.Error)
	}
	if ex := runOut(t, sb, "2 + 2"); ex.Text() != "4" {
		t.Errorf("sandbox unusable after the fork bomb: %v", ex.Error)
	}
}

func TestLocalLifetime(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sb := newLocal(t, func(c *sandboxes.Config) { c.MaxLifetime = 2 * time.Second })
	time.Sleep(4 * time.Second)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := sandboxes.Get(context.Background(), localConfig(t), sb.ID()); errors.Is(err, sandboxes.ErrNotFound) {
			_, err := sb.RunCode(context.Background(), "1")
			if err == nil {
				t.Fatal("expired sandbox still runs code")
			}
			// The error says what happened, not how the dial failed.
			if !errors.Is(err, sandboxes.ErrUnavailable) || !strings.Contains(err.Error(), "lifetime ended or it was killed") || strings.Contains(err.Error(), "dial unix") {
				t.Fatalf("RunCode on an expired sandbox: %v; want ErrUnavailable saying it expired or was killed", err)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("sandbox outlived its lifetime")
}

// A sandbox unused for its IdleTimeout ends itself; an execution longer
// than the idle timeout is use throughout.
func TestLocalIdleTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	ctx := context.Background()
	sb := newLocal(t, func(c *sandboxes.Config) { c.IdleTimeout = 2 * time.Second })
	ex, err := sb.RunCode(ctx, "import time; time.sleep(3); 'awake'")
	if err != nil || !strings.Contains(ex.Text(), "awake") {
		t.Fatalf("a run longer than the idle timeout: %v, %v", ex, err)
	}
	if _, err := sb.RunCode(ctx, "1"); err != nil {
		t.Fatalf("the sandbox ended right after a long run: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := sandboxes.Get(ctx, localConfig(t), sb.ID()); errors.Is(err, sandboxes.ErrNotFound) {
			return
		}
		time.Sleep(250 * time.Millisecond) // Get reads records only: not use
	}
	t.Fatal("the sandbox outlived its idle timeout")
}

// Files errors say what happened once and match the right sentinel: a
// read-only path is ErrPermission, a missing one ErrNotFound.
func TestLocalFileErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	ctx := context.Background()
	sb := newLocal(t, nil)
	err := sb.Files().WriteBytes(ctx, "/usr/x", []byte("a"))
	if !errors.Is(err, sandboxes.ErrPermission) || !strings.Contains(err.Error(), "read-only") || strings.Contains(err.Error(), ".upload") {
		t.Errorf("write to a read-only path: %v; want ErrPermission saying read-only, no internal names", err)
	}
	_, err = sb.Files().ReadBytes(ctx, "/home/user/nope")
	if !errors.Is(err, sandboxes.ErrNotFound) || strings.Count(err.Error(), "no such file") != 1 {
		t.Errorf("read of a missing file: %v; want ErrNotFound saying so once", err)
	}
	if _, err := sb.Files().MakeDir(ctx, "/usr/newdir"); !errors.Is(err, sandboxes.ErrPermission) {
		t.Errorf("mkdir on a read-only path: %v; want ErrPermission", err)
	}
}

func TestInvalidConfig(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []sandboxes.Config{
		{Variant: "nope"},
		{Memory: -2},
		{Pids: -5},
		{Memory: 1000},
		{CPU: -2},
		{NetworkPolicy: "sometimes"},
		{NetworkPolicy: "allowlist"},
		{AllowedHosts: []string{"x.com"}},
		{WorkingDir: "relative"},
		{Tags: map[string]string{"bad key!": "v"}},
		{Env: map[string]string{"A=B": "c"}},
		{MaxLifetime: -time.Second},
		{IdleTimeout: -5 * time.Second},
		{Name: "has space"},
		{Name: "../etc"},
		{Name: "-leading-dash"},
		{Name: "new\nline"},
	} {
		if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) {
			t.Errorf("Create(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := sandboxes.Create(ctx, sandboxes.Config{Variant: "e2b", IdleTimeout: time.Minute}); !errors.Is(err, sandboxes.ErrNotSupported) {
		t.Errorf("IdleTimeout on e2b = %v, want ErrNotSupported with the reason", err)
	}
	if testing.Short() {
		return
	}
	sb := newLocal(t, nil)
	if _, err := sb.RunCode(ctx, "1", sandboxes.WithTimeout(-time.Second)); !errors.Is(err, sandboxes.ErrInvalidInput) {
		t.Errorf("RunCode with WithTimeout(-1s) = %v, want ErrInvalidInput", err)
	}
	if _, err := sandboxes.Kill(ctx, localConfig(t), "", sandboxes.ListOptions{}); !errors.Is(err, sandboxes.ErrInvalidInput) {
		t.Errorf("Kill with no selector = %v", err)
	}
}

// TestLocalStaleRecordCleaned kills a sandbox's supervisor with SIGKILL: the
// next List leaves it out and touches nothing (a read has no side effects);
// Sweep ends the orphaned agent and removes every trace of it.
func TestLocalStaleRecordCleaned(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sb := newLocal(t, func(c *sandboxes.Config) { c.Memory = 128 << 20 })
	dir := local.SandboxDir(runtimeDir(t), sb.ID())
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		ShimPid  int      `json:"shim_pid"`
		AgentPid int      `json:"agent_pid"`
		Cgroups  []string `json:"cgroups"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(rec.ShimPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	list, err := sandboxes.List(context.Background(), localConfig(t), sandboxes.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range list {
		if i.ID == sb.ID() {
			t.Fatalf("a sandbox whose supervisor died is still listed")
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("List removed the dead sandbox's directory (a read with side effects): %v", err)
	}
	if syscall.Kill(rec.AgentPid, 0) != nil {
		t.Fatalf("List killed the orphaned agent (a read with side effects)")
	}
	n, err := sandboxes.Sweep(context.Background(), localConfig(t))
	if err != nil || n < 1 {
		t.Fatalf("Sweep: %d %v", n, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its directory is still there: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(rec.AgentPid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if syscall.Kill(rec.AgentPid, 0) == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", rec.AgentPid)); !strings.Contains(string(st), ") Z ") {
			t.Errorf("the orphaned agent (pid %d) still runs", rec.AgentPid)
		}
	}
	for _, d := range rec.Cgroups {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left behind", d)
		}
	}
}

// `python` is on PATH next to python3, as in E2B's sandboxes (Debian's
// python-is-python3, which make deps installs on the host).
func TestLocalPythonOnPath(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	_, err := os.Stat("/usr/bin/python")
	sandboxestest.Require(t, err == nil, "Debian's python-is-python3 (make deps)")
	sb := newLocal(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Commands().Run(ctx, "python -c 'print(6 * 7)'")
	if err != nil || strings.TrimSpace(res.Stdout) != "42" {
		t.Fatalf("python: %+v %v", res, err)
	}
}

// Kernels for other languages: state, streaming, errors; a language the
// sandbox can't run is refused with the reason.
func TestLocalLanguages(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	_, errNode := exec.LookPath("node")
	sandboxestest.Require(t, errNode == nil, "node (make deps)")
	sb := newLocal(t, nil)
	js := sandboxes.WithLanguage("javascript")
	runOut(t, sb, "let n = 20", js)
	ex := runOut(t, sb, "console.log('from node'); n * 2 + 2", js)
	if ex.Stdout() != "from node\n" || ex.Text() != "42" || ex.Error != nil {
		t.Fatalf("javascript: %q %q %v", ex.Stdout(), ex.Text(), ex.Error)
	}
	ex = runOut(t, sb, "null.x", js)
	if ex.Error == nil || ex.Error.Name != "TypeError" {
		t.Fatalf("javascript error: %+v", ex.Error)
	}
	sh := sandboxes.WithLanguage("bash")
	runOut(t, sb, "N=7", sh)
	if ex := runOut(t, sb, "echo $((N * 6)) $(whoami)", sh); ex.Stdout() != "42 user\n" {
		t.Fatalf("bash: %q %v", ex.Stdout(), ex.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := sb.RunCode(ctx, "1 + 1", sandboxes.WithLanguage("cobol"))
	if !errors.Is(err, sandboxes.ErrInvalidInput) || !strings.Contains(err.Error(), "\"cobol\"") {
		t.Fatalf("cobol: %v", err)
	}
	cc, err := sb.CreateContext(ctx, sandboxes.ContextOptions{Language: "js"})
	if err != nil || cc.Language != "javascript" {
		t.Fatalf("javascript context: %+v %v", cc, err)
	}
	if ex := runOut(t, sb, "typeof n", sandboxes.InContext(cc)); ex.Text() != "undefined" {
		t.Fatalf("contexts share state: %q", ex.Text())
	}
}
