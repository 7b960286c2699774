package sandboxes_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8s "k8s.io/client-go/kubernetes"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/k8stest"
	"github.com/code-sandboxes/code-sandboxes/internal/kubernetes"
	k8svariant "github.com/code-sandboxes/code-sandboxes/kubernetes"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// The kubernetes tests need a cluster (KUBECONFIG) into which they can
// import images (CODE_SANDBOXES_K8S_IMPORT): scripts/with-k8s.sh gives
// both. They export the built "python" environment with this test binary
// as its agent (internal/k8stest), import it, and run sandboxes from it.

type k8sEnv struct {
	cs    k8s.Interface
	image string
}

func k8sCluster(t *testing.T) *k8sEnv {
	t.Helper()
	e := k8stest.Cluster(t)
	// The variant's own settings must reach it: without this, every
	// Kubernetes.* field below would be silently ignored.
	_, err := sandboxes.List(context.Background(), sandboxes.Config{Variant: "kubernetes", Options: k8svariant.Options{Kubeconfig: "/nonexistent/kubeconfig"}}, sandboxes.ListOptions{})
	if err == nil {
		t.Fatal("Config.Options does not reach the kubernetes variant (sandboxes.Config.spec must pass it on)")
	}
	return &k8sEnv{cs: e.CS, image: e.Image}
}

// namespace makes a namespace of its own for a test (so that "nothing
// left behind" can be checked exactly), removed at the end.
func (e *k8sEnv) namespace(t *testing.T) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "cs-test-" + hex.EncodeToString(b[:])
	ctx := k8sCtx(t, time.Minute)
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = e.cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return name
}

// leftovers lists what the variant made in ns and is still there.
func (e *k8sEnv) leftovers(t *testing.T, ns string) []string {
	t.Helper()
	ctx := k8sCtx(t, time.Minute)
	sel := metav1.ListOptions{LabelSelector: "created-by=code-sandboxes"}
	var out []string
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		out = append(out, "pod/"+p.Name)
	}
	secrets, err := e.cs.CoreV1().Secrets(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		out = append(out, "secret/"+s.Name)
	}
	nps, err := e.cs.NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nps.Items {
		out = append(out, "networkpolicy/"+n.Name)
	}
	return out
}

// importFake exports the fake store's build, with agent as its agent, and
// imports it into the cluster.
func (e *k8sEnv) importFake(t *testing.T, dir, name, agent string) {
	t.Helper()
	st, err := environment.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Resolve(name)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), name+".tar")
	f, err := os.Create(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	err = environment.WriteImageTar(k8sCtx(t, time.Minute), b, environment.ImageTag(b), []environment.ExtraFile{{Path: environment.AgentPath, HostPath: agent, Mode: 0o755}}, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	argv := append(strings.Fields(os.Getenv("CODE_SANDBOXES_K8S_IMPORT")), tarPath)
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("importing %s: %v: %s", tarPath, err, out)
	}
}

// k8sFakeStore is an environment store holding one build record, name,
// whose image was never loaded into the cluster.
func k8sFakeStore(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	sum := sha256.Sum256([]byte("fake environment " + name))
	id := hex.EncodeToString(sum[:])
	for _, d := range []string{"builds/" + id + "/rootfs", "names"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rec := fmt.Sprintf(`{"id":%q,"name":%q,"base":"debian bookworm"}`, id, name)
	if err := os.WriteFile(filepath.Join(dir, "builds", id, "build.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "names", name), []byte(id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func k8sCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func k8sConfig(ns string) sandboxes.Config {
	return sandboxes.Config{Variant: "kubernetes", NetworkPolicy: sandboxes.NetworkAll,
		Options: k8svariant.Options{Namespace: ns}}
}

func newK8s(t *testing.T, cfg sandboxes.Config) *sandboxes.Sandbox {
	t.Helper()
	sb, err := sandboxes.Create(k8sCtx(t, 5*time.Minute), cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

// TestKubernetesConformance runs the shared suite. Network "all": the test
// cluster's bridge plugin doesn't enforce NetworkPolicy, so the default
// ("none") is refused there (TestKubernetesNetworkPolicy).
func TestKubernetesConformance(t *testing.T) {
	e := k8sCluster(t)
	// Registered first, so it runs after the suite's own clean-ups: every
	// sandbox closed leaves nothing behind.
	t.Cleanup(func() {
		deadline := time.Now().Add(30 * time.Second)
		for l := e.leftovers(t, "default"); len(l) > 0; l = e.leftovers(t, "default") {
			if time.Now().After(deadline) {
				t.Errorf("left behind: %v", l)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	start := time.Now()
	sb := newK8s(t, k8sConfig(""))
	created := time.Since(start)
	ex, err := sb.RunCode(k8sCtx(t, time.Minute), "1 + 1")
	if err != nil || ex.Text() != "2" {
		t.Fatalf("first RunCode: %v %v", ex, err)
	}
	t.Logf("create %s, create → first result %s", created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	_ = sb.Close()
	sandboxestest.Run(t, k8sConfig(""), sandboxestest.Options{Rich: true})
}

// TestKubernetesPodHardening checks the pod against the sandbox contract
// and that user code can't read the agent's token.
func TestKubernetesPodHardening(t *testing.T) {
	e := k8sCluster(t)
	sb := newK8s(t, k8sConfig(""))
	ctx := k8sCtx(t, 2*time.Minute)
	pod, err := e.cs.CoreV1().Pods("default").Get(ctx, "code-sandboxes-"+sb.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := pod.Spec
	c := s.Containers[0]
	switch {
	case s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken:
		t.Error("service account token mounted")
	case s.EnableServiceLinks == nil || *s.EnableServiceLinks:
		t.Error("service links enabled")
	case s.Hostname != "sandbox" || s.RestartPolicy != corev1.RestartPolicyNever:
		t.Errorf("hostname %q restart %q", s.Hostname, s.RestartPolicy)
	case s.ActiveDeadlineSeconds == nil || *s.ActiveDeadlineSeconds != int64((24*time.Hour+30*time.Second)/time.Second):
		t.Errorf("activeDeadlineSeconds %v", s.ActiveDeadlineSeconds)
	case *s.SecurityContext.RunAsUser != 1000 || *s.SecurityContext.RunAsGroup != 100 || *s.SecurityContext.FSGroup != 100 || !*s.SecurityContext.RunAsNonRoot:
		t.Errorf("pod security context %+v", s.SecurityContext)
	case *c.SecurityContext.AllowPrivilegeEscalation || !*c.SecurityContext.ReadOnlyRootFilesystem || len(c.SecurityContext.Capabilities.Drop) != 1 || c.SecurityContext.Capabilities.Drop[0] != "ALL":
		t.Errorf("container security context %+v", c.SecurityContext)
	case c.SecurityContext.SeccompProfile == nil || c.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccomp %+v", c.SecurityContext.SeccompProfile)
	case pod.Labels["created-by"] != "code-sandboxes" || pod.Labels["code-sandboxes.id"] != sb.ID():
		t.Errorf("labels %v", pod.Labels)
	}
	for _, env := range c.Env {
		if env.Name == "CODE_SANDBOXES_TOKEN" && env.Value != "" {
			t.Error("the token is in the pod spec")
		}
	}
	ex, err := sb.RunCode(ctx, `import os
out = []
try:
    open('/proc/1/environ').read(); out.append('environ readable')
except PermissionError:
    out.append('environ closed')
out.append(str(any(k.startswith(('CODE_SANDBOXES', 'KUBERNETES')) and k != 'CODE_SANDBOXES_TOOLS_SOCKET' for k in os.environ)))  # the tools socket's path is the kernels' to know (docs/agent-protocol.md)
try:
    open('/etc/probe', 'w'); out.append('root writable')
except OSError:
    out.append('root read-only')
import socket; out.append(socket.gethostname())
print(' '.join(out))`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(ex.Stdout()); got != "environ closed False root read-only sandbox" {
		t.Errorf("inside the sandbox: %q %v", got, ex.Error)
	}
}

func TestKubernetesNetworkPolicy(t *testing.T) {
	e := k8sCluster(t)
	ns := e.namespace(t)
	ctx := k8sCtx(t, 5*time.Minute)

	// The default, "none", with nothing asserted: on the test cluster
	// (kube-router as a host daemon: nothing in kube-system says it
	// enforces) the sandbox's own pod proves it; a cluster that doesn't
	// enforce NetworkPolicy refuses, saying what to set.
	sb0, err := sandboxes.Create(ctx, sandboxes.Config{Variant: "kubernetes", Options: k8svariant.Options{Namespace: ns}})
	if os.Getenv("CODE_SANDBOXES_K8S_NETWORKPOLICY") == "enforced" {
		if err != nil {
			t.Fatalf("default network on a cluster that enforces NetworkPolicy: %v", err)
		}
		sb0.Close()
	} else {
		if !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "NetworkPolicyEnforced = true") || !strings.Contains(err.Error(), "CODE_SANDBOXES_K8S_NETWORKPOLICY_ENFORCED=1") {
			t.Fatalf("default network on a non-enforcing cluster: %v", err)
		}
		t.Log(err)
		if l := e.leftovers(t, ns); len(l) > 0 {
			t.Errorf("a refused Create left %v", l)
		}
	}

	// Asserted enforcement: the sandbox gets a deny-all policy of its own.
	cfg := sandboxes.Config{Variant: "kubernetes", Options: k8svariant.Options{Namespace: ns, NetworkPolicyEnforced: true}}
	sb := newK8s(t, cfg)
	np, err := e.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, "code-sandboxes-"+sb.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 || np.Spec.PodSelector.MatchLabels["code-sandboxes.id"] != sb.ID() {
		t.Errorf("policy for none: %+v", np.Spec)
	}
	if ex, err := sb.RunCode(ctx, "6 * 7"); err != nil || ex.Text() != "42" {
		t.Fatalf("sandbox with network none: %v %v", ex, err)
	}
	info, _ := sb.Info(ctx)
	if info.Network != "none" {
		t.Errorf("info network %q", info.Network)
	}

	// Allowlist: addresses only.
	cfg.NetworkPolicy, cfg.AllowedHosts = sandboxes.NetworkAllowlist, []string{"192.0.2.7", "198.51.100.0/24"}
	sb2 := newK8s(t, cfg)
	np, err = e.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, "code-sandboxes-"+sb2.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.Egress) != 1 || len(np.Spec.Egress[0].To) != 2 || np.Spec.Egress[0].To[0].IPBlock.CIDR != "192.0.2.7/32" {
		t.Errorf("policy for the allowlist: %+v", np.Spec.Egress)
	}
	cfg.AllowedHosts = []string{"pypi.org"}
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "IP addresses and CIDR blocks only") {
		t.Errorf("allowlist with a name: %v", err)
	}
	_ = sb.Close()
	_ = sb2.Close()
	if l := e.leftovers(t, ns); len(l) > 0 {
		t.Errorf("Close left %v", l)
	}
}

// TestKubernetesFailures checks the message a user gets for each way a pod
// fails to start, and that a failed Create leaves nothing behind.
func TestKubernetesFailures(t *testing.T) {
	e := k8sCluster(t)
	ns := e.namespace(t)
	fake := k8sFakeStore(t, "notloaded")
	// An image whose agent dies at once, as a code-sandboxes binary from
	// before the kubernetes variant would: a static program that refuses
	// the agent's flags.
	oldAgent := filepath.Join(t.TempDir(), "agent")
	src := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport (\"fmt\"; \"os\")\n\nfunc main() {\n\tfmt.Fprintln(os.Stderr, \"Error: unknown flag: --sandbox\")\n\tos.Exit(1)\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", oldAgent, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a stand-in old agent: %v: %s", err, out)
	}
	broken := k8sFakeStore(t, "broken")
	e.importFake(t, broken, "broken", oldAgent)
	cases := []struct {
		name string
		mod  func(*sandboxes.Config)
		want []string
	}{
		{"MissingImage", func(c *sandboxes.Config) {
			o := k8sOptions(c)
			o.Image, o.ImagePullPolicy = "code-sandboxes-env:missing", "Never"
		}, []string{"code-sandboxes-env:missing is not on the node", "environments export", "ctr -n k8s.io images import"}},
		{"MissingImagePull", func(c *sandboxes.Config) {
			k8sOptions(c).Image = "localhost:1/code-sandboxes-env:missing"
		}, []string{"could not be pulled", "environments export"}},
		{"EnvironmentNotLoaded", func(c *sandboxes.Config) {
			c.EnvironmentDir, c.Environment = fake, "notloaded"
			k8sOptions(c).ImagePullPolicy = "Never"
		}, []string{"is not on the node", "code-sandboxes environments export notloaded -o notloaded.tar"}},
		{"AgentDies", func(c *sandboxes.Config) {
			c.EnvironmentDir, c.Environment = broken, "broken"
			k8sOptions(c).ImagePullPolicy = "Never"
		}, []string{"the sandbox's agent exited with status 1", "unknown flag: --sandbox", "looks older than this program"}},
		{"UnschedulableMemory", func(c *sandboxes.Config) { c.Memory = 1 << 40 }, []string{"no node has room", "Insufficient memory", "retry later"}},
		{"UnschedulableSelector", func(c *sandboxes.Config) {
			k8sOptions(c).NodeSelector = map[string]string{"code-sandboxes.test/nowhere": "true"}
		}, []string{"no node can run", "node affinity/selector"}},
		{"Pids", func(c *sandboxes.Config) { c.Pids = 100 }, []string{"podPidsLimit"}},
		{"NotBuilt", func(c *sandboxes.Config) { c.Environment = "never-built-env" }, []string{"not built on this machine", "environments export never-built-env"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := k8sConfig(ns)
			tc.mod(&cfg)
			start := time.Now()
			sb, err := sandboxes.Create(k8sCtx(t, 5*time.Minute), cfg)
			if err == nil {
				sb.Close()
				t.Fatal("Create succeeded")
			}
			t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q", w)
				}
			}
			// A full node is worth retrying (serve: 503, Retry-After).
			if full := tc.name == "UnschedulableMemory"; full != errors.Is(err, sandboxes.ErrNoRoom) {
				t.Errorf("errors.Is(err, ErrNoRoom) = %v", !full)
			}
		})
	}
	t.Cleanup(func() {
		if l := e.leftovers(t, ns); len(l) > 0 {
			t.Errorf("failed Creates left %v", l)
		}
	})
}

// TestKubernetesOOM: a kernel that outgrows the memory limit is killed, the
// user is told, and the sandbox goes on.
func TestKubernetesOOM(t *testing.T) {
	k8sCluster(t)
	cfg := k8sConfig("")
	cfg.Memory = 256 << 20
	sb := newK8s(t, cfg)
	ctx := k8sCtx(t, 3*time.Minute)
	info, err := sb.Info(ctx)
	if err != nil || info.Memory != 256<<20 {
		t.Fatalf("info %+v %v", info, err)
	}
	ex, err := sb.RunCode(ctx, "x = 1\nblocks = []\nwhile True: blocks.append(bytearray(16 << 20))")
	if err != nil {
		t.Fatal(err)
	}
	if ex.Error == nil {
		t.Fatalf("allocating past the limit: no error (%q)", ex.Stdout())
	}
	t.Logf("user sees: %s: %s", ex.Error.Name, ex.Error.Value)
	if !strings.Contains(ex.Error.Value+ex.Error.Name, "signal 9") && !strings.Contains(ex.Error.Value, "MemoryError") && ex.Error.Name != "MemoryError" {
		t.Errorf("error doesn't say the kernel was killed: %+v", ex.Error)
	}
	ex, err = sb.RunCode(ctx, "1 + 1")
	if err != nil || ex.Text() != "2" {
		t.Fatalf("after the OOM: %v %v", ex, err)
	}
}

// TestKubernetesLifetime: Kill and List by label, SetTimeout's bound, and
// the sweep of expired and ended pods.
func TestKubernetesLifetime(t *testing.T) {
	e := k8sCluster(t)
	ns := e.namespace(t)
	ctx := k8sCtx(t, 5*time.Minute)
	cfg := k8sConfig(ns)
	cfg.MaxLifetime = 2 * time.Minute
	cfg.Tags = map[string]string{"team": "k8s", "odd.key/with-slash": "any value!"}
	sb := newK8s(t, cfg)
	list, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{Tags: map[string]string{"odd.key/with-slash": "any value!"}})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID() || list[0].Tags["team"] != "k8s" {
		t.Fatalf("list by an odd tag: %+v %v", list, err)
	}
	if err := sb.SetTimeout(ctx, time.Hour); !errors.Is(err, sandboxes.ErrInvalidInput) || !strings.Contains(err.Error(), "MaxLifetime") {
		t.Errorf("SetTimeout past the pod's deadline: %v", err)
	}
	if err := sb.SetTimeout(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}

	// An expiry that passed (the agent would have ended itself; here it
	// still runs): List only reads; Sweep removes the pod.
	other := newK8s(t, cfg)
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"code-sandboxes.end-at":%q}}}`, past)
	if _, err := e.cs.CoreV1().Pods(ns).Patch(ctx, "code-sandboxes-"+other.ID(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// A sandbox whose agent ends at its lifetime: its ended pod is swept.
	short := cfg
	short.MaxLifetime = 3 * time.Second
	ended := newK8s(t, short)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		pod, err := e.cs.CoreV1().Pods(ns).Get(ctx, "code-sandboxes-"+ended.ID(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pod.Status.ContainerStatuses) > 0 && pod.Status.ContainerStatuses[0].State.Terminated != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not end at its lifetime: %+v", pod.Status)
		}
	}
	list, err = sandboxes.List(ctx, cfg, sandboxes.ListOptions{Tags: map[string]string{"team": "k8s"}})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID() {
		t.Fatalf("list after expiry: %+v %v", list, err)
	}
	if _, err := sandboxes.Sweep(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{other.ID(), ended.ID()} {
		k8sWaitGone(t, e, ns, id)
	}

	// Kill by tag.
	killed, err := sandboxes.Kill(ctx, cfg, "", sandboxes.ListOptions{Tags: map[string]string{"team": "k8s"}})
	if err != nil || len(killed) != 1 || killed[0] != sb.ID() {
		t.Fatalf("kill by tag: %v %v", killed, err)
	}
	if _, err := sb.RunCode(ctx, "1"); err == nil {
		t.Error("a killed sandbox still runs code")
	}
	k8sWaitGone(t, e, ns, sb.ID())
	if l := e.leftovers(t, ns); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

func k8sWaitGone(t *testing.T, e *k8sEnv, ns, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := e.cs.CoreV1().Pods(ns).Get(context.Background(), "code-sandboxes-"+id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod of %s still there after 30s (%v)", id, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestKubernetesWarmPool: the second Create is served from the pool, as
// the sandbox asked for, and closing the pools leaves nothing behind.
func TestKubernetesWarmPool(t *testing.T) {
	e := k8sCluster(t)
	ns := e.namespace(t)
	ctx := k8sCtx(t, 5*time.Minute)
	cfg := k8sConfig(ns)
	k8sOptions(&cfg).WarmPool = 1
	before := kubernetes.Stats()
	first := newK8s(t, cfg)
	if s := kubernetes.Stats(); s.Misses != before.Misses+1 {
		t.Errorf("first Create: stats %+v (before %+v)", s, before)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for kubernetes.Stats().Ready < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never filled: %+v", kubernetes.Stats())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Pool pods are not sandboxes yet: List doesn't show them.
	if list, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{}); err != nil || len(list) != 1 {
		t.Errorf("list with a warm pod waiting: %+v %v", list, err)
	}
	c2 := cfg
	c2.Name, c2.Tags, c2.MaxLifetime = "from-pool", map[string]string{"pool": "yes"}, 10*time.Minute
	start := time.Now()
	sb := newK8s(t, c2)
	took := time.Since(start)
	ex, err := sb.RunCode(ctx, "x = 41\nx + 1")
	if err != nil || ex.Text() != "42" {
		t.Fatalf("pooled sandbox: %v %v", ex, err)
	}
	t.Logf("warm create %s, create → first result %s", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if s := kubernetes.Stats(); s.Hits != before.Hits+1 {
		t.Errorf("second Create: stats %+v", s)
	}
	info, err := sb.Info(ctx)
	if err != nil || info.Name != "from-pool" || info.Tags["pool"] != "yes" || time.Until(info.EndAt) < 9*time.Minute {
		t.Errorf("pooled sandbox's info: %+v %v", info, err)
	}
	pod, err := e.cs.CoreV1().Pods(ns).Get(ctx, "code-sandboxes-"+sb.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Lowered from the pool's week to the sandbox's 10 minutes (plus the
	// pod's age and a grace).
	if _, pooled := pod.Labels["code-sandboxes.pool"]; pooled || pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds > 12*60 {
		t.Errorf("claimed pod: labels %v deadline %v", pod.Labels, pod.Spec.ActiveDeadlineSeconds)
	}
	if list, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{Tags: map[string]string{"pool": "yes"}}); err != nil || len(list) != 1 {
		t.Errorf("list the pooled sandbox by tag: %+v %v", list, err)
	}
	_ = first.Close()
	_ = sb.Close()
	kubernetes.ClosePools(ctx)
	deadline = time.Now().Add(30 * time.Second)
	for {
		l := e.leftovers(t, ns)
		if len(l) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind after ClosePools: %v", l)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// k8sOptions makes c.Options a fresh *k8svariant.Options (the variant
// takes a pointer as well as a value) holding what it had, and returns it
// for a test to change; copies of c made before keep theirs.
func k8sOptions(c *sandboxes.Config) *k8svariant.Options {
	var o k8svariant.Options
	switch v := c.Options.(type) {
	case *k8svariant.Options:
		o = *v
	case k8svariant.Options:
		o = v
	}
	c.Options = &o
	return &o
}

// TestKubernetesTemplateHome: what an environment's build left in its
// /home/user is in its pods' home, as on the other variants: the exported
// image carries it at homeseed.Dir, and the agent copies it into the
// home's tmpfs as the sandbox's user before it serves. Hostile entries
// stay harmless: a symlink stays a symlink (resolved in the pod), a
// set-uid bit is dropped, a fifo is left out.
func TestKubernetesTemplateHome(t *testing.T) {
	e := k8sCluster(t)
	ns := e.namespace(t)
	store := k8sFakeStore(t, "homeenv")
	roots, _ := filepath.Glob(filepath.Join(store, "builds", "*", "rootfs"))
	if len(roots) != 1 {
		t.Fatalf("the fake store's rootfs: %v", roots)
	}
	home := filepath.Join(roots[0], "home", "user")
	if err := os.MkdirAll(filepath.Join(home, ".config", "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"built.txt": 0o644, ".config/app/rc": 0o600, "tool": 0o755 | os.ModeSetuid} {
		if err := os.WriteFile(filepath.Join(home, name), []byte("built in the template: "+name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(home, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(home, "shadow")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(home, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The user's, as a build's steps leave it (they run as the user).
	if err := filepath.Walk(home, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 1000, 100)
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(home, "tool"), 0o755|os.ModeSetuid); err != nil { // chown cleared it
		t.Fatal(err)
	}
	agent, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e.importFake(t, store, "homeenv", agent)
	cfg := k8sConfig(ns)
	cfg.EnvironmentDir, cfg.Environment = store, "homeenv"
	o := k8sOptions(&cfg)
	// The image has no python3 for the probe that proves NetworkPolicy is
	// enforced; this cluster's kube-router enforces it.
	o.ImagePullPolicy, o.NetworkPolicyEnforced = "Never", true
	sb := newK8s(t, cfg)
	ctx := k8sCtx(t, time.Minute)
	for _, name := range []string{"built.txt", ".config/app/rc", "tool"} {
		b, err := sb.Files().ReadBytes(ctx, "/home/user/"+name)
		if err != nil || string(b) != "built in the template: "+name+"\n" {
			t.Errorf("/home/user/%s in the pod: %q, %v", name, b, err)
		}
	}
	if st, err := sb.Files().Stat(ctx, "/home/user/tool"); err != nil || (st.Owner != "user" && st.Owner != "1000") || st.Mode&os.ModeSetuid != 0 || st.Mode.Perm() != 0o755 {
		t.Errorf("/home/user/tool: %+v, %v; want the user's (uid 1000: the image has no passwd), 0755, no set-uid bit", st, err)
	}
	if st, err := sb.Files().Stat(ctx, "/home/user/.config/app/rc"); err != nil || st.Mode.Perm() != 0o600 {
		t.Errorf("/home/user/.config/app/rc: %+v, %v; want 0600", st, err)
	}
	if st, err := sb.Files().Stat(ctx, "/home/user/shadow"); err != nil || st.Type != "symlink" {
		t.Errorf("/home/user/shadow: %+v, %v; want a symlink", st, err)
	}
	if ok, err := sb.Files().Exists(ctx, "/home/user/fifo"); ok || err != nil {
		t.Errorf("/home/user/fifo copied (%v, %v): special files are not a home's content", ok, err)
	}
	if err := sb.Files().WriteBytes(ctx, "/home/user/built.txt", []byte("changed in the pod\n")); err != nil {
		t.Errorf("the seeded home is not the user's to write: %v", err)
	}
}
