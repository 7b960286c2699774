package e2b_test

import (
	"context"
	"errors"
	neturl "net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	e2bvariant "github.com/code-sandboxes/code-sandboxes/e2b"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
	"github.com/code-sandboxes/code-sandboxes/internal/testpypi"
	_ "github.com/code-sandboxes/code-sandboxes/local" // the local variant
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// TestMain: the test binary is also the sandboxes' agent and supervisor
// (the in-process server creates local sandboxes by re-executing it).
func TestMain(m *testing.M) {
	local.Main()
	os.Exit(m.Run())
}

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// e2bServer runs our E2B-compatible server on 127.0.0.1:0 over a fresh
// runtime directory; at the end it shuts down, killing what it created, and
// the test fails if any sandbox was left behind.
func e2bServer(t *testing.T) string {
	t.Helper()
	return e2bServerWith(t, nil)
}

// e2bServerWith is e2bServer whose sandboxes' Config mod changes.
func e2bServerWith(t *testing.T, mod func(*sandboxes.Config)) string {
	t.Helper()
	if err := isolate.CheckSupport(); err != nil {
		testdep.Require(t, false, "local sandboxes: "+err.Error())
	}
	rt, err := os.MkdirTemp("", "cs-e2bv-")
	if err != nil {
		t.Fatal(err)
	}
	scfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}
	if mod != nil {
		mod(&scfg)
	}
	s, err := e2bserver.New(e2bserver.Options{APIKeys: []string{testKey}, Config: scfg})
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := s.StartLoopback(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		if ents, _ := os.ReadDir(rt); len(ents) != 0 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
				_, _ = sandboxes.Kill(context.Background(), sandboxes.Config{Options: local.Options{RuntimeDir: rt}}, e.Name(), sandboxes.ListOptions{})
			}
			t.Errorf("sandboxes left behind: %s", strings.Join(names, ", "))
		}
		os.RemoveAll(rt)
	})
	return url
}

func serverConfig(url string) sandboxes.Config {
	return sandboxes.Config{Variant: "e2b", Options: e2bvariant.Options{APIKey: testKey, APIURL: url, SandboxURL: url}}
}

func hasRich() bool {
	// The sandbox's python3 is the host's /usr/bin/python3.
	return exec.Command("/usr/bin/python3", "-c", "import numpy, matplotlib").Run() == nil
}

// TestConformanceAgainstOurServer runs the whole suite through E2B's
// protocols: our variant → our server's API and data-plane proxy → the
// local sandbox's agent (which has the /x/ extensions).
func TestConformanceAgainstOurServer(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	url := e2bServer(t)
	sandboxestest.Run(t, serverConfig(url), sandboxestest.Options{Rich: testdep.Want(t, hasRich(), "Debian's python3-numpy, python3-matplotlib and python3-pandas (make deps): the rich-output checks")})
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestAgainstOurServer covers what the suite does not: refusals, the
// reported network, names and metadata, vanished sandboxes.
func TestAgainstOurServer(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	url := e2bServer(t)
	ctx := ctxT(t, 5*time.Minute)
	cfg := serverConfig(url)

	// Network policies go through E2B's allowOut/denyOut and updateNetwork;
	// what the server refuses comes back with its reason.
	t.Run("NetworkThroughServer", func(t *testing.T) {
		c := cfg
		c.NetworkPolicy, c.AllowedHosts = sandboxes.NetworkAllowlist, []string{"10.0.0.0/8"}
		_, err := sandboxes.Create(ctx, c)
		t.Log(err)
		if !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "private range") {
			t.Fatalf("allowlist of a private range = %v, want ErrInvalidConfig with the server's reason", err)
		}
		c.AllowedHosts = []string{"pypi.org"}
		sb, err := sandboxes.Create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		// What serve says the sandbox has: allowOut the host, deny the rest.
		if i, err := sb.Info(ctx); err != nil || i.Network != sandboxes.NetworkAllowlist || strings.Join(i.AllowedHosts, ",") != "pypi.org" || strings.Join(i.DeniedHosts, ",") != "0.0.0.0/0" {
			t.Errorf("info: %q allowed %q denied %q %v", i.Network, i.AllowedHosts, i.DeniedHosts, err)
		}
		if err := sb.UpdateNetwork(ctx, sandboxes.Network{Policy: sandboxes.NetworkAll}); err != nil {
			t.Fatal(err)
		}
		if i, err := sb.Info(ctx); err != nil || i.Network != sandboxes.NetworkAll {
			t.Errorf("info after the update: %q %v", i.Network, err)
		}
	})

	t.Run("LimitsRefused", func(t *testing.T) {
		for _, mod := range []func(*sandboxes.Config){
			func(c *sandboxes.Config) { c.Memory = 512 << 20 },
			func(c *sandboxes.Config) { c.CPU = 1 },
			func(c *sandboxes.Config) { c.Pids = 100 },
		} {
			c := cfg
			mod(&c)
			if _, err := sandboxes.Create(ctx, c); !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "E2B") {
				t.Errorf("limit: %v, want ErrNotSupported with a reason", err)
			}
		}
	})

	t.Run("NetworkNoneNameTagsEnvWorkdir", func(t *testing.T) {
		c := cfg
		c.NetworkPolicy = sandboxes.NetworkNone
		c.Name = "e2b-variant-test"
		c.Tags = map[string]string{"team": "ai"}
		c.Env = map[string]string{"CS_E2B": "yes"}
		c.WorkingDir = "/home/user/work"
		c.MaxLifetime = 10 * time.Minute
		sb, err := sandboxes.Create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Name != c.Name || info.Tags["team"] != "ai" || info.Network != "none" || info.Variant != "e2b" || len(info.Tags) != 1 {
			t.Errorf("info = %+v", info)
		}
		if d := time.Until(info.EndAt); d < 9*time.Minute || d > 11*time.Minute {
			t.Errorf("ends in %s, want about 10m", d)
		}
		ex, err := sb.RunCode(ctx, "import os; print(os.environ.get('CS_E2B'), os.getcwd())")
		if err != nil || strings.TrimSpace(ex.Stdout()) != "yes /home/user/work" {
			t.Errorf("env/workdir = %q, %v (error %v)", ex.Stdout(), err, ex.Error)
		}
		ex, _ = sb.RunCode(ctx, "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); print('open')\nexcept OSError: print('closed')")
		if strings.TrimSpace(ex.Stdout()) != "closed" {
			t.Errorf("network none reaches out: %q", ex.Stdout())
		}
		// Listed only with the right filters; other code-sandboxes users'
		// sandboxes are not ours unless ListAll.
		list, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{Name: c.Name})
		if err != nil || len(list) != 1 || list[0].ID != sb.ID() {
			t.Errorf("list by name = %+v, %v", list, err)
		}
		list, err = sandboxes.List(ctx, cfg, sandboxes.ListOptions{Tags: map[string]string{"team": "other"}})
		if err != nil || len(list) != 0 {
			t.Errorf("list by another tag = %+v, %v", list, err)
		}
	})

	t.Run("VanishedSandbox", func(t *testing.T) {
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		id := sb.ID()
		if _, err := sandboxes.Kill(ctx, cfg, id, sandboxes.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = sb.RunCode(ctx, "1")
		t.Log(err)
		if !errors.Is(err, sandboxes.ErrNotFound) || !strings.Contains(err.Error(), "expired or was killed") {
			t.Errorf("RunCode on a killed sandbox = %v, want ErrNotFound saying it expired or was killed", err)
		}
		if _, err := sb.Files().ReadBytes(ctx, "/etc/hostname"); !errors.Is(err, sandboxes.ErrNotFound) {
			t.Errorf("read file on a killed sandbox = %v, want ErrNotFound", err)
		}
		if _, err := sb.Commands().Run(ctx, "true"); !errors.Is(err, sandboxes.ErrNotFound) {
			t.Errorf("command on a killed sandbox = %v, want ErrNotFound", err)
		}
		if ok, err := sb.Files().Exists(ctx, "/etc/hostname"); ok || err == nil {
			t.Errorf("exists on a killed sandbox = %v, %v; want an error", ok, err)
		}
		if err := sb.SetTimeout(ctx, time.Minute); !errors.Is(err, sandboxes.ErrNotFound) || !strings.Contains(err.Error(), "expired or was killed") {
			t.Errorf("SetTimeout on a killed sandbox = %v", err)
		}
		if _, err := sb.Info(ctx); !errors.Is(err, sandboxes.ErrNotFound) {
			t.Errorf("Info on a killed sandbox = %v", err)
		}
		if err := sb.Close(); err != nil {
			t.Errorf("Close on a killed sandbox = %v", err)
		}
	})

	t.Run("Packages", func(t *testing.T) {
		sandboxestest.Require(t, exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run() == nil, "Debian's python3-pip (make deps)")
		index := testpypi.Serve(t, "cs-e2b-demo", testpypi.FileName("cs-e2b-demo", "1.0"),
			testpypi.Wheel(t, "cs_e2b_demo", "1.0", "cs_e2b_demo", "VALUE = 42\n"))
		// A network-all sandbox reaches the internet, never the host: the
		// index (on the host's loopback) is published in a test internet.
		sandboxestest.Require(t, os.Geteuid() == 0, "root, to build the test internet (network namespaces, veth)")
		n, err := testnet.Start()
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		u, _ := neturl.Parse(index)
		if u.Host, err = n.Forward(u.Host); err != nil {
			t.Fatal(err)
		}
		c := cfg
		c.NetworkPolicy = sandboxes.NetworkAll // pip reaches the index
		c.Env = map[string]string{"PIP_TRUSTED_HOST": testnet.ServerIPv4}
		c.Packages, c.PackageIndex = []string{"cs-e2b-demo==1.0"}, u.String()
		sb, err := sandboxes.Create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		ex, err := sb.RunCode(ctx, "import cs_e2b_demo\ncs_e2b_demo.VALUE")
		if err != nil || ex.Text() != "42" {
			t.Fatalf("installed package: %q %v %v", ex.Text(), ex.Error, err)
		}
		c.Packages = []string{"cs-e2b-missing"}
		if _, err := sandboxes.Create(ctx, c); !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "cs-e2b-missing") {
			t.Errorf("missing package = %v", err)
		}
	})

	t.Run("InsecureAndEnvironments", func(t *testing.T) {
		c := cfg
		no := false
		e2bOptions(&c).Secure = &no
		// serve refuses sandboxes without an envd token (anyone who knew
		// the id could use one) unless its operator allows them, saying so.
		if _, err := sandboxes.Create(ctx, c); err == nil || !strings.Contains(err.Error(), "--allow-insecure-sandboxes") {
			t.Fatalf("secure false against serve = %v, want the refusal with its reason", err)
		}
		c = cfg
		c.Environment = "e2b-code-interpreter"
		sb, err := sandboxes.Create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		if ex, err := sb.RunCode(ctx, "6 * 7"); err != nil || ex.Text() != "42" {
			t.Errorf("sandbox on the named environment: %v %v", ex, err)
		}
		envs, err := sandboxes.ListEnvironments(ctx, cfg)
		if err != nil || len(envs) != 1 || envs[0].Name != "e2b-code-interpreter" || envs[0].Variant != "e2b" {
			t.Errorf("environments = %+v, %v", envs, err)
		}
	})

	t.Run("WrongKey", func(t *testing.T) {
		c := cfg
		e2bOptions(&c).APIKey = "e2b_" + strings.Repeat("f", 40)
		_, err := sandboxes.Create(ctx, c)
		t.Log(err)
		if !errors.Is(err, sandboxes.ErrUnauthorized) || !strings.Contains(err.Error(), "e2b.Options.APIKey") {
			t.Errorf("wrong key = %v", err)
		}
	})
}
