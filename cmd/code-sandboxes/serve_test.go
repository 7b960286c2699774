//go:build !localonly

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/spf13/cobra"
)

// startServe runs `serve` in-process (the test binary is also the sandbox
// agent, as the real one is) and returns its URL and API key. Cancelling
// the context is what SIGINT/SIGTERM do through main's NotifyContext.
func startServe(t *testing.T, ctx context.Context, rt string, args ...string) (url, key string, done <-chan error) {
	t.Helper()
	cmd := serveCmd()
	pr, pw := io.Pipe()
	cmd.SetOut(pw)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(append([]string{"--listen", "127.0.0.1:0", "--runtime-dir", rt}, args...))
	t.Setenv("E2B_API_KEY", "")
	for i, a := range args {
		if a == "--api-key" && i+1 < len(args) {
			key = args[i+1] // not printed then
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- cmd.ExecuteContext(ctx); pw.Close() }()
	sc := bufio.NewScanner(pr)
	for (url == "" || key == "") && sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "E2B_API_URL":
			url = v
		case "E2B_API_KEY":
			if key == "" {
				key = v
			}
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if url == "" || key == "" {
		t.Fatalf("serve printed no URL or key (%v)", <-errc)
	}
	return url, key, errc
}

func createE2B(t *testing.T, url, key string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/sandboxes", strings.NewReader(`{"templateID":"base","timeout":60}`))
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb struct{ SandboxID string }
	_ = json.NewDecoder(resp.Body).Decode(&sb)
	if resp.StatusCode != 201 || sb.SandboxID == "" {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	return sb.SandboxID
}

func TestServeKillsItsSandboxesOnShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	for _, keep := range []bool{false, true} {
		rt := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		var args []string
		if keep {
			args = append(args, "--keep-sandboxes")
		}
		url, key, done := startServe(t, ctx, rt, args...)
		if !strings.HasPrefix(key, "e2b_") || len(key) != 44 {
			t.Errorf("generated key %q is not e2b_<40 hex>", key)
		}
		id := createE2B(t, url, key)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("serve did not stop")
		}
		_, err := os.Stat(local.SandboxDir(rt, id))
		if keep && err != nil {
			t.Errorf("--keep-sandboxes: sandbox %s is gone: %v", id, err)
		}
		if !keep && err == nil {
			t.Errorf("sandbox %s survived the server's shutdown", id)
		}
		if keep {
			// A new server with the same key adopts the sandbox for its team.
			ctx2, cancel2 := context.WithCancel(context.Background())
			url2, _, done2 := startServe(t, ctx2, rt, "--api-key", key, "--keep-sandboxes")
			req, _ := http.NewRequest("GET", url2+"/sandboxes/"+id, nil)
			req.Header.Set("X-API-Key", key)
			if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
				t.Errorf("the restarted server does not see the kept sandbox: %v %v", resp, err)
			}
			cancel2()
			<-done2
			if _, _, code := cli(t, "", "delete", "--runtime-dir", rt, id, "-y"); code != 0 {
				t.Errorf("cleaning up %s failed", id)
			}
		}
	}
}

func TestServeRefusesBadKey(t *testing.T) {
	cmd := serveCmd()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"--listen", "127.0.0.1:0", "--api-key", "sk-not-e2b", "--runtime-dir", t.TempDir()})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "e2b_") {
		t.Errorf("bad key: %v", err)
	}
}

func TestReadKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keys")
	if err := os.WriteFile(p, []byte("# team keys\ne2b_00ff\n\ne2b_abc123 team-a # A's key\ne2b_ab team-a sandboxes=3 memory=512M total-cpu=2 creates-per-minute=10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := readKeyFile(p)
	if err != nil || len(keys) != 3 || keys[0].Team != "" || keys[1].Key != "e2b_abc123" || keys[1].Team != "team-a" || keys[1].Quota != nil {
		t.Fatalf("keys = %v, %v", keys, err)
	}
	if q := keys[2].Quota; q == nil || *q != (e2bserver.Quota{Sandboxes: 3, Memory: 512 << 20, TotalCPU: 2, CreatesPerMinute: 10}) {
		t.Errorf("quota = %+v", q)
	}
	for _, bad := range []string{"e2b_00 sandboxes=3\n", "e2b_00 t bogus=1\n", "e2b_00 t sandboxes=x\n", "e2b_00 bad/team\n"} {
		_ = os.WriteFile(p, []byte(bad), 0o600)
		if _, err := readKeyFile(p); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	_ = os.Chmod(p, 0o644)
	if _, err := readKeyFile(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable key file: %v", err)
	}
	_ = os.Chmod(p, 0o600)
	_ = os.WriteFile(p, []byte("not-a-key\n"), 0o600)
	if _, err := readKeyFile(p); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad key: %v", err)
	}
}

// TestServeReloadsKeyFileOnSIGHUP: a key added to the file works after
// SIGHUP, a removed one stops working, and a broken file keeps the old keys.
func TestServeReloadsKeyFileOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keys")
	const k1, k2 = "e2b_1111", "e2b_2222"
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(k1 + " team-a\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, _, done := startServe(t, ctx, t.TempDir(), "--api-key-file", p, "--api-key", "e2b_0000")
	status := func(key string) int {
		req, _ := http.NewRequest("GET", url+"/v2/sandboxes", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor := func(key string, want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for status(key) != want {
			if time.Now().After(deadline) {
				t.Fatalf("key %s: status %d, want %d", key, status(key), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if status(k1) != 200 || status(k2) != 401 {
		t.Fatalf("before reload: %d %d", status(k1), status(k2))
	}
	write(k2 + " team-b\n")
	_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(k2, 200)
	waitFor(k1, 401)
	write("not a key\n")
	_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
	time.Sleep(200 * time.Millisecond)
	if status(k2) != 200 {
		t.Error("a broken key file dropped the old keys")
	}
	cancel()
	<-done
}

// The network ceiling (issue #41 item 9): a default above it, or mcp's
// --network above it, is refused at start, naming the flag.
func TestMaxNetworkFlags(t *testing.T) {
	for _, c := range []struct {
		cmd  func() *cobra.Command
		args []string
		want string
	}{
		{serveCmd, []string{"--default-network", "all", "--max-network", "none"}, "--max-network"},
		{serveCmd, []string{"--default-network", "all", "--max-network", "allowlist"}, "--max-network"},
		{serveCmd, []string{"--max-network", "some"}, "--max-network"},
		{mcpCmd, []string{"--network", "all", "--max-network", "none"}, "--max-network none"},
		{mcpCmd, []string{"--network", "all", "--max-network", "allowlist"}, "--max-network allowlist"},
		{mcpCmd, []string{"--network", "allowlist", "--allow", "example.com", "--max-network", "none"}, "--max-network none"},
	} {
		cmd := c.cmd()
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		args := append([]string{"--listen", "127.0.0.1:0", "--runtime-dir", t.TempDir()}, c.args...)
		if cmd.Name() == "serve" {
			args = append(args, "--api-key", "e2b_00")
		}
		cmd.SetArgs(args)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want an error naming %s", cmd.Name(), c.args, err, c.want)
		}
	}
}
