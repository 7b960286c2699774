//go:build linux

package main

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
	"github.com/code-sandboxes/code-sandboxes/internal/testpypi"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// TestExecNetworkFlags: --network allowlist --allow reaches the allowed
// name of the test internet and nothing else; --network all reaches it by
// address; --allow without allowlist is refused.
func TestExecNetworkFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes and network namespaces")
	}
	sandboxestest.Require(t, os.Geteuid() == 0, "root, to build the test internet (network namespaces, veth)")
	n, err := testnet.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	t.Setenv("CODE_SANDBOXES_DNS", n.DNS) // cli() passes our environment on
	fetch := `import urllib.request
def get(u):
    try:
        return urllib.request.urlopen(u, timeout=10).read().decode().strip()
    except Exception as e:
        return type(e).__name__
print(get("http://%s/"), "|", get("http://%s/"))`
	code := fmt.Sprintf(fetch, testnet.NameWWW, testnet.ServerIPv4)
	out, errs, rc := cli(t, "", "exec", "--network", "allowlist", "--allow", testnet.NameWWW, code)
	// By address: the name's address, but the Host header isn't the name.
	if rc != 0 || strings.TrimSpace(out) != "internet "+testnet.NameWWW+" | ConnectionResetError" {
		t.Errorf("allowlist: %d %q %q", rc, out, errs)
	}
	out, errs, rc = cli(t, "", "exec", "--network", "all", code)
	if rc != 0 || strings.TrimSpace(out) != "internet "+testnet.NameWWW+" | internet "+testnet.ServerIPv4 {
		t.Errorf("all: %d %q %q", rc, out, errs)
	}
	// --deny the address, --allow the name: the name is the exception
	// (by address, the Host is not the name: reset).
	out, errs, rc = cli(t, "", "exec", "--network", "all", "--deny", testnet.ServerIPv4, "--allow", testnet.NameWWW, code)
	if rc != 0 || strings.TrimSpace(out) != "internet "+testnet.NameWWW+" | ConnectionResetError" {
		t.Errorf("all --deny --allow: %d %q %q", rc, out, errs)
	}
	if _, errs, rc := cli(t, "", "exec", "--deny", "example.com", "--network", "all", "1"); rc != 1 || !strings.Contains(errs, "only IPs and CIDRs") {
		t.Errorf("--deny a name: %d %q", rc, errs)
	}
	if _, errs, rc := cli(t, "", "exec", "--allow", testnet.NameWWW, "1"); rc != 1 || !strings.Contains(errs, "allowlist") {
		t.Errorf("--allow without allowlist: %d %q", rc, errs)
	}
}

// TestPackageFlag: exec --package pip-installs the requirement from
// --package-index before the code runs; without network, with --sandbox,
// or an index without packages, it is refused with the reason.
func TestPackageFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes and network namespaces")
	}
	if _, errs, rc := cli(t, "", "exec", "--package", "cs-demo==1.0", "1"); rc != 1 || !strings.Contains(errs, "network") {
		t.Errorf("--package without network: %d %q", rc, errs)
	}
	if _, errs, rc := cli(t, "", "exec", "--package-index", "http://index.invalid/simple", "1"); rc != 1 || !strings.Contains(errs, "--package-index applies only with --package") {
		t.Errorf("--package-index alone: %d %q", rc, errs)
	}
	if _, errs, rc := cli(t, "", "exec", "--sandbox", "nope", "--package", "x", "1"); rc != 1 || !strings.Contains(errs, "--package applies only when creating") {
		t.Errorf("--package with --sandbox: %d %q", rc, errs)
	}
	if _, errs, rc := cli(t, "", "exec", "--network", "all", "--package", "--index-url=http://evil", "1"); rc != 1 || !strings.Contains(errs, "no options") {
		t.Errorf("an option as --package: %d %q", rc, errs)
	}
	sandboxestest.Require(t, os.Geteuid() == 0, "root, to build the test internet (network namespaces, veth)")
	sandboxestest.Require(t, exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run() == nil, "Debian's python3-pip (make deps)")
	wheel := testpypi.Wheel(t, "cs_demo", "1.0", "cs_demo", "VALUE = 42\n")
	index := testpypi.Serve(t, "cs-demo", testpypi.FileName("cs_demo", "1.0"), wheel)
	n, err := testnet.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	t.Setenv("CODE_SANDBOXES_DNS", n.DNS)
	// The index (on the host's loopback) published in the test internet,
	// which the sandbox reaches; the host it never does.
	u, _ := url.Parse(index)
	if u.Host, err = n.Forward(u.Host); err != nil {
		t.Fatal(err)
	}
	out, errs, rc := cli(t, "", "exec", "--network", "all", "--env", "PIP_TRUSTED_HOST="+testnet.ServerIPv4,
		"--package", "cs-demo==1.0", "--package-index", u.String(), "import cs_demo\nprint(cs_demo.VALUE)")
	if rc != 0 || strings.TrimSpace(out) != "42" {
		t.Errorf("exec --package: %d %q %q", rc, out, errs)
	}
}
