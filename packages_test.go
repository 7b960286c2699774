//go:build linux

package sandboxes_test

import (
	"context"
	"errors"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
	"github.com/code-sandboxes/code-sandboxes/internal/testpypi"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

func TestLocalPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sandboxestest.Require(t, exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run() == nil, "Debian's python3-pip (make deps)")
	wheel := testpypi.Wheel(t, "cs_demo", "1.0", "cs_demo", "VALUE = 42\n")
	index := testpypi.Serve(t, "cs-demo", testpypi.FileName("cs_demo", "1.0"), wheel)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cfg := localConfig(t)
	cfg.Packages, cfg.PackageIndex = []string{"cs-demo==1.0"}, index
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "network") {
		t.Fatalf("packages with network none = %v, want a refusal that names the network", err)
	}
	// The sandbox reaches the internet, never the host: the index (on the
	// host's loopback) is published in the test's own internet.
	n := testInternet(t)
	u, _ := url.Parse(index)
	fwd, err := n.Forward(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fwd
	cfg.PackageIndex = u.String()
	cfg.Env = map[string]string{"PIP_TRUSTED_HOST": testnet.ServerIPv4}
	cfg.NetworkPolicy = sandboxes.NetworkAll
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ex, err := sb.RunCode(ctx, "import cs_demo\ncs_demo.VALUE")
	if err != nil || ex.Text() != "42" {
		t.Fatalf("installed package: %q %v %v", ex.Text(), ex.Error, err)
	}

	cfg.Packages = []string{"cs-missing-package"}
	_, err = sandboxes.Create(ctx, cfg)
	if !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "cs-missing-package") {
		t.Fatalf("missing package = %v", err)
	}
	cfg.Packages = []string{"--index-url=http://evil"}
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) {
		t.Errorf("option injection = %v", err)
	}
}
