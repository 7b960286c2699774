//go:build linux

package sandboxes_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
	k8svariant "github.com/code-sandboxes/code-sandboxes/kubernetes"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// TestKubernetesNetworkEnforced: on the test cluster, which enforces
// NetworkPolicy (kube-router's policy controller, started by
// scripts/k8s-cluster.sh as a host daemon, so nothing in kube-system says
// so: the first sandbox's pod proves it), network none reaches nothing,
// an allowlist by CIDR only its CIDR, and all the internet but not the
// private ranges (unless AllowPrivate), the node, or another sandbox.
func TestKubernetesNetworkEnforced(t *testing.T) {
	e := k8sCluster(t)
	sandboxestest.Require(t, os.Getenv("CODE_SANDBOXES_K8S_NETWORKPOLICY") == "enforced",
		"a cluster that enforces NetworkPolicy (scripts/with-k8s.sh runs kube-router's policy controller)")
	testInternet(t)
	ns := e.namespace(t)
	ctx := k8sCtx(t, 5*time.Minute)
	tries := fmt.Sprintf("_fmt(\"server\", http(%q))\n_fmt(\"private\", http(%q))\n", testnet.ServerIPv4, testnet.PrivateIPv4)
	reach := map[string]string{"server": "ok:internet " + testnet.ServerIPv4, "private": "ok:private " + testnet.PrivateIPv4}

	// No assertion: the default none works, proven by its own pod.
	opts := k8svariant.Options{Namespace: ns}
	none := newK8s(t, sandboxes.Config{Variant: "kubernetes", Options: opts})
	first := probe(t, none, tries)
	if info, _ := none.Info(ctx); info.Network != "none" {
		t.Errorf("default network %q", info.Network)
	}
	al := newK8s(t, sandboxes.Config{Variant: "kubernetes", NetworkPolicy: sandboxes.NetworkAllowlist,
		AllowedHosts: []string{testnet.ServerIPv4 + "/32"}, Options: opts})
	all := newK8s(t, k8sConfig(ns))
	priv := newK8s(t, sandboxes.Config{Variant: "kubernetes", NetworkPolicy: sandboxes.NetworkAll, AllowPrivate: true, Options: opts})
	expect(t, probe(t, all, tries), map[string]string{"server": reach["server"], "private": "err:*"})
	expect(t, probe(t, priv, tries), reach)
	expect(t, probe(t, none, tries), map[string]string{"server": "err:*", "private": "err:*"})
	expect(t, probe(t, al, tries), map[string]string{"server": reach["server"], "private": "err:*"})
	// Right after Create the policy is in force already (kube-router
	// programs it a moment after the pod starts: Create waits for it).
	expect(t, first, map[string]string{"server": "err:*", "private": "err:*"})

	// Sandboxes never reach each other, even with network all (with
	// AllowPrivate too: the pod range is private, but every sandbox
	// refuses ingress), nor their node's kubelet.
	if ex, err := all.RunCode(ctx, serveInSandbox); err != nil || ex.Error != nil || strings.TrimSpace(ex.Stdout()) != "listening" {
		t.Fatalf("server in the sandbox: %v %+v", err, ex)
	}
	pod, err := e.cs.CoreV1().Pods(ns).Get(ctx, "code-sandboxes-"+all.ID(), metav1.GetOptions{})
	if err != nil || pod.Status.PodIP == "" || pod.Status.HostIP == "" {
		t.Fatalf("the sandbox's pod: %v %+v", err, pod.Status)
	}
	between := fmt.Sprintf("_fmt(\"peer\", http(%q, port=8080))\n_fmt(\"kubelet\", lambda: (socket.create_connection((%q, 10250), timeout=5).close(), \"connected\")[1])\n", pod.Status.PodIP, pod.Status.HostIP)
	if got := probe(t, all, fmt.Sprintf("_fmt(\"self\", http(%q, port=8080))\n", "127.0.0.1")); !strings.HasPrefix(got["self"], "ok:") {
		t.Fatalf("the server does not answer inside its own sandbox: %v", got)
	}
	for _, from := range []*sandboxes.Sandbox{priv, al} {
		expect(t, probe(t, from, between), map[string]string{"peer": "err:*", "kubelet": "err:*"})
	}
}

// serveInSandbox starts an HTTP server on port 8080 in the sandbox's
// kernel, answering "peer".
const serveInSandbox = `import http.server, threading
class _H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"peer\n")
    def log_message(self, *a): pass
_srv = http.server.ThreadingHTTPServer(("0.0.0.0", 8080), _H)
threading.Thread(target=_srv.serve_forever, daemon=True).start()
print("listening")`
