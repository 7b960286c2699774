package docker

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/ids"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// requireRoot fails with CI=true (where the tests run as root) and skips
// elsewhere.
func requireRoot(t *testing.T) {
	t.Helper()
	testdep.Require(t, os.Geteuid() == 0, "root")
}

func health(t *testing.T, sock string, initPid int) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return agentClient(sock, "token", initPid).Health(ctx)
}

// TestPeerCheck: the host talks to a socket only when the agent serves it,
// and refuses (before sending the token) one that code running as the
// sandbox's user put in its place.
func TestPeerCheck(t *testing.T) {
	requireRoot(t)
	dir, err := os.MkdirTemp("", "cs-peer-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}

	// Served by uid 0 (as the agent is when it opens its socket).
	good := filepath.Join(dir, "good.sock")
	ln, err := net.Listen("unix", good)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	}()
	if err := health(t, good, 0); err != nil {
		t.Fatalf("a socket served by uid 0: %v", err)
	}

	// Served by uid 1000, as user code in a sandbox would.
	evil := filepath.Join(dir, "evil.sock")
	py := exec.Command("/usr/bin/python3", "-c", `import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    try:
        if c.recv(65536):
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    except OSError:
        pass
    c.close()`, evil)
	py.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: sandboxUID, Gid: sandboxGID}}
	out, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := py.Start(); err != nil {
		t.Fatalf("python3 as uid %d: %v", sandboxUID, err)
	}
	defer func() { _ = py.Process.Kill(); _ = py.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("impostor did not start: %q %v", line, err)
	}
	err = health(t, evil, 4242)
	var pe *peerError
	if !errors.As(err, &pe) || !errors.Is(err, sberr.ErrUnavailable) || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("a socket served by uid %d: %v, want a refusal", sandboxUID, err)
	}
	// Executions dial the agent themselves (the lean execution connection):
	// the same check, before the upgrade request carries the token.
	c := agentClient(evil, "token", 4242)
	if !c.LeanExecute() {
		t.Fatal("the docker variant's client does not use the lean execution connection")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Execute(ctx, client.ExecuteRequest{Code: "1"}, func(client.Line) {})
	if !errors.As(err, &pe) || !errors.Is(err, sberr.ErrUnavailable) {
		t.Fatalf("an execution on a socket served by uid %d: %v, want a refusal", sandboxUID, err)
	}
	// The agent's pid is accepted whatever its uid (rootless engines).
	if err := health(t, evil, py.Process.Pid); err != nil {
		t.Fatalf("the expected init pid: %v", err)
	}
}

func TestAgentBinary(t *testing.T) {
	if _, err := agentBinary("/usr/bin/python3"); !errors.Is(err, sberr.ErrInvalidConfig) || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("dynamic binary: %v", err)
	}
	if _, err := agentBinary("/etc/hostname"); !errors.Is(err, sberr.ErrInvalidConfig) {
		t.Errorf("not an ELF: %v", err)
	}
	if _, err := agentBinary("/nonexistent"); !errors.Is(err, sberr.ErrInvalidConfig) {
		t.Errorf("missing: %v", err)
	}
	if os.Getenv("CGO_ENABLED") == "0" {
		if p, err := agentBinary(""); err != nil || !filepath.IsAbs(p) {
			t.Errorf("this (static) test binary: %q %v", p, err)
		}
	}
}

// TestRemoveSandboxDirOnlyOurs: a directory reached through a container's
// mount is removed only when it provably is a sandbox's.
func TestRemoveSandboxDirOnlyOurs(t *testing.T) {
	rt := t.TempDir()
	t.Setenv("CODE_SANDBOXES_DOCKER_RUNTIME_DIR", rt)
	id := ids.Sandbox('d')
	mk := func(dir string, rec *record) string {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if rec != nil {
			if err := writeRecord(dir, rec); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	elsewhere := t.TempDir()
	for _, tc := range []struct {
		name    string
		dir     string
		id      string
		removed bool
	}{
		{"ours", mk(filepath.Join(rt, id), &record{ID: id}), id, true},
		{"debris without record in the runtime dir", mk(filepath.Join(rt, "d0123456789abcdef"), nil), "d0123456789abcdef", true},
		{"no record outside the runtime dir", mk(filepath.Join(elsewhere, "d1123456789abcdef"), nil), "d1123456789abcdef", false},
		{"record of another sandbox", mk(filepath.Join(elsewhere, "d2123456789abcdef"), &record{ID: "d9999999999999999"}), "d2123456789abcdef", false},
		{"name is not the id", mk(filepath.Join(rt, "other"), &record{ID: "d3123456789abcdef"}), "d3123456789abcdef", false},
		{"not an id", mk(filepath.Join(rt, "x"), &record{ID: "x"}), "x", false},
	} {
		_ = removeSandboxDir(tc.dir, tc.id)
		_, err := os.Stat(tc.dir)
		if gone := errors.Is(err, os.ErrNotExist); gone != tc.removed {
			t.Errorf("%s: removed = %v, want %v", tc.name, gone, tc.removed)
		}
	}
}

// TestNetworkMode: never the engine's bridge (it reaches the host): every
// policy starts from the engine's "none", networked ones get ours.
func TestNetworkMode(t *testing.T) {
	for policy, want := range map[string]string{"": "none", "none": "none", "all": "none", "allowlist": "none"} {
		if _, m, err := networkMode(policy); err != nil || string(m) != want {
			t.Errorf("%q: %q %v", policy, m, err)
		}
	}
	if _, _, err := networkMode("sometimes"); !errors.Is(err, sberr.ErrInvalidConfig) {
		t.Errorf("unknown policy: %v", err)
	}
}

func TestRemoteEngineRefused(t *testing.T) {
	for host, local := range map[string]bool{
		"unix:///var/run/docker.sock": true, "tcp://127.0.0.1:2375": true, "tcp://localhost:2375": true,
		"tcp://[::1]:2375": true, "tcp://10.1.2.3:2376": false, "ssh://me@builder": false, "tcp://docker.example:2376": false,
	} {
		if got := localEngine(host); got != local {
			t.Errorf("localEngine(%q) = %v, want %v", host, got, local)
		}
	}
	_, err := connect(context.Background(), driver.Spec{Variant: "docker", Options: Options{Host: "tcp://10.1.2.3:2376"}})
	if !errors.Is(err, sberr.ErrInvalidConfig) || !strings.Contains(err.Error(), "another machine") {
		t.Errorf("remote engine: %v", err)
	}
}
