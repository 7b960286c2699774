//go:build linux

package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
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
