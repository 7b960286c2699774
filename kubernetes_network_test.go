//go:build linux

package sandboxes_test

import (
	"fmt"
	"os"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
	k8svariant "github.com/code-sandboxes/code-sandboxes/kubernetes"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// TestKubernetesNetworkEnforced: on the test cluster, which enforces
// NetworkPolicy (kube-router's policy controller, started by
// scripts/k8s-cluster.sh), network none reaches nothing and an allowlist by
// CIDR only its CIDR; network all (no policy) reaching both servers of the
// test internet shows the route is there.
func TestKubernetesNetworkEnforced(t *testing.T) {
	e := k8sCluster(t)
	sandboxestest.Require(t, os.Getenv("CODE_SANDBOXES_K8S_NETWORKPOLICY") == "enforced",
		"a cluster that enforces NetworkPolicy (scripts/with-k8s.sh runs kube-router's policy controller)")
	testInternet(t)
	ns := e.namespace(t)
	tries := fmt.Sprintf("_fmt(\"server\", http(%q))\n_fmt(\"private\", http(%q))\n", testnet.ServerIPv4, testnet.PrivateIPv4)
	reach := map[string]string{"server": "ok:internet " + testnet.ServerIPv4, "private": "ok:private " + testnet.PrivateIPv4}

	opts := k8svariant.Options{Namespace: ns, NetworkPolicyEnforced: true}
	none := newK8s(t, sandboxes.Config{Variant: "kubernetes", NetworkPolicy: sandboxes.NetworkNone, Options: opts})
	first := probe(t, none, tries)
	al := newK8s(t, sandboxes.Config{Variant: "kubernetes", NetworkPolicy: sandboxes.NetworkAllowlist,
		AllowedHosts: []string{testnet.ServerIPv4 + "/32"}, Options: opts})
	all := newK8s(t, k8sConfig(ns))
	expect(t, probe(t, all, tries), reach)
	expect(t, probe(t, none, tries), map[string]string{"server": "err:*", "private": "err:*"})
	expect(t, probe(t, al, tries), map[string]string{"server": reach["server"], "private": "err:*"})
	// Right after Create the policy is in force already (kube-router
	// programs it a moment after the pod starts: Create waits for it).
	expect(t, first, map[string]string{"server": "err:*", "private": "err:*"})
}
