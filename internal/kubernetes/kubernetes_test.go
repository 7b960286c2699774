package kubernetes

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// These tests need no cluster; the root package's kubernetes_test.go runs
// the variant against a real one.

func TestEgressPeers(t *testing.T) {
	got, err := egressPeers([]string{"10.1.2.3", "192.168.0.0/16", "2001:db8::1", "10.9.9.9/8"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "10.1.2.3/32", "192.168.0.0/16", "2001:db8::1/128"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"pypi.org", "*.example.com", "10.0.0.1:443", ""} {
		if _, err := egressPeers([]string{bad}); !errors.Is(err, sberr.ErrInvalidConfig) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestLabels(t *testing.T) {
	for in, want := range map[string]string{
		"nightly": "nightly", "my sandbox!": "my-sandbox", "-x-": "x", "ünï": "n",
		strings.Repeat("a", 80): strings.Repeat("a", 63),
	} {
		if got := sanitizeLabel(in); got != want {
			t.Errorf("sanitizeLabel(%q) = %q, want %q", in, got, want)
		}
	}
	if k, ok := tagLabel("team", "ai"); !ok || k != "tag.code-sandboxes/team" {
		t.Errorf("tagLabel(team) = %q %v", k, ok)
	}
	for _, kv := range [][2]string{{"a/b", "x"}, {"team", "has space"}, {"team", strings.Repeat("v", 64)}} {
		if _, ok := tagLabel(kv[0], kv[1]); ok {
			t.Errorf("tagLabel(%q, %q) accepted", kv[0], kv[1])
		}
	}
}

func testPlan() *plan {
	return &plan{c: &cluster{key: "k", namespace: "ns"}, image: "img:1", pullPolicy: corev1.PullIfNotPresent,
		env: map[string]string{"A": "b"}, workdir: "/home/user", network: "none", memory: 512 << 20, cpus: 1.5, prewarm: true}
}

func TestPodFor(t *testing.T) {
	p := testPlan()
	m := meta{id: "kabcdefghijklmnop", name: "n 1", tags: map[string]string{"team": "ai", "x/y": "z"}, lifetime: time.Hour}
	pod := podFor(p, m, time.Now().Add(time.Hour))
	s, c := pod.Spec, pod.Spec.Containers[0]
	if pod.Name != "code-sandboxes-kabcdefghijklmnop" || pod.Labels[labelID] != m.id || pod.Labels[labelName] != "n-1" ||
		pod.Annotations[annName] != "n 1" || pod.Labels["tag.code-sandboxes/team"] != "ai" || !strings.Contains(pod.Annotations[annTags], `"x/y":"z"`) {
		t.Errorf("meta %+v", pod.ObjectMeta)
	}
	if *s.ActiveDeadlineSeconds != 3630 || *s.AutomountServiceAccountToken || *s.EnableServiceLinks || s.Hostname != "sandbox" {
		t.Errorf("spec %+v", s)
	}
	if c.Command[0] != "/opt/code-sandboxes/agent" || !slices.Contains(c.Args, "--sandbox") || !slices.Contains(c.Args, "tcp:127.0.0.1:49983") {
		t.Errorf("command %v %v", c.Command, c.Args)
	}
	for _, e := range c.Env {
		if (e.Name == tokenEnv || e.Name == envEnv) && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("%s is not from the secret: %+v", e.Name, e)
		}
	}
	if q := c.Resources.Limits[corev1.ResourceCPU]; q.MilliValue() != 1500 {
		t.Errorf("cpu %s", q.String())
	}
	if q := c.Resources.Requests[corev1.ResourceMemory]; q.Value() != 512<<20 {
		t.Errorf("memory %s", q.String())
	}
	if len(s.Volumes) != 3 || s.Volumes[0].EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("volumes %+v", s.Volumes)
	}
	if s.HostUsers != nil {
		t.Errorf("hostUsers set without UserNamespaces: %v", *s.HostUsers)
	}
	p.userns = true
	if hu := podFor(p, m, time.Now().Add(time.Hour)).Spec.HostUsers; hu == nil || *hu {
		t.Errorf("UserNamespaces: hostUsers %v, want false", hu)
	}
	withUserns := p.key()
	p.userns = false
	if p.key() == withUserns {
		t.Error("pods with and without a user namespace share a warm pool")
	}
	// A warm-pool pod: no identity, the pool's deadline (lowered at hand-out).
	m.pool = "abc"
	pod = podFor(p, m, time.Now())
	if *pod.Spec.ActiveDeadlineSeconds != 7*24*3600 || pod.Labels[labelPool] != "true" || pod.Annotations[annName] != "" {
		t.Errorf("pool pod %+v %v", pod.ObjectMeta, pod.Spec.ActiveDeadlineSeconds)
	}
	if np := networkPolicyFor(p, m, ""); len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 || len(np.Spec.Ingress) != 0 {
		t.Errorf("policy %+v", np)
	}
	// Network all: everything but the cluster's own ranges (and the
	// node, when its address is outside them), plus the cluster's DNS.
	p.network = "all"
	np := networkPolicyFor(p, m, "203.0.113.9")
	if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 2 || len(np.Spec.Egress[0].To) != 2 {
		t.Fatalf("policy for all: %+v", np.Spec)
	}
	v4, v6 := np.Spec.Egress[0].To[0].IPBlock, np.Spec.Egress[0].To[1].IPBlock
	ex4, ex6 := strings.Join(v4.Except, " "), strings.Join(v6.Except, " ")
	for _, want := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8", "203.0.113.9/32"} {
		if v4.CIDR != "0.0.0.0/0" || !strings.Contains(ex4, want) {
			t.Errorf("all's IPv4 block %s except %s: lacks %s", v4.CIDR, ex4, want)
		}
	}
	if v6.CIDR != "::/0" || !strings.Contains(ex6, "fc00::/7") || !strings.Contains(ex6, "fe80::/10") {
		t.Errorf("all's IPv6 block %s except %s", v6.CIDR, ex6)
	}
	if dns := np.Spec.Egress[1]; len(dns.Ports) != 2 || dns.Ports[0].Port.IntValue() != 53 || dns.To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("all's DNS rule %+v", dns)
	}
	// A private node is excluded with its range; AllowPrivate opens the
	// private ranges, never the node.
	if ex := strings.Join(networkPolicyFor(p, m, "10.1.2.3").Spec.Egress[0].To[0].IPBlock.Except, " "); strings.Contains(ex, "10.1.2.3/32") || !strings.Contains(ex, "10.0.0.0/8") {
		t.Errorf("private node: except %s", ex)
	}
	p.allowPrivate = true
	if ex := strings.Join(networkPolicyFor(p, m, "10.1.2.3").Spec.Egress[0].To[0].IPBlock.Except, " "); !strings.Contains(ex, "10.1.2.3/32") || strings.Contains(ex, "10.0.0.0/8") || !strings.Contains(ex, "169.254.0.0/16") {
		t.Errorf("AllowPrivate: except %s", ex)
	}
}

func TestPodFailure(t *testing.T) {
	base := func() *corev1.Pod {
		p := podFor(testPlan(), meta{id: "kabcdefghijklmnop", lifetime: time.Hour}, time.Now())
		p.Spec.NodeName = "node1"
		return p
	}
	waiting := func(reason, msg string) *corev1.Pod {
		p := base()
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
		return p
	}
	long := time.Now().Add(-time.Minute)
	unsched := base()
	unsched.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient memory."}}
	unschedWith := func(msg string) *corev1.Pod {
		p := base()
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
		return p
	}
	oom := base()
	oom.Status.Phase = corev1.PodFailed
	oom.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
	evicted := base()
	evicted.Status.Phase, evicted.Status.Reason, evicted.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	oldAgent := base()
	oldAgent.Status.Phase = corev1.PodFailed
	oldAgent.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1, Message: "Error: unknown flag: --sandbox"}}}}
	bigHome := base()
	bigHome.Status.Phase = corev1.PodFailed
	bigHome.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1,
		Message: "code-sandboxes-agent: the environment's /home/user does not fit the sandbox's home (a 1024 MiB tmpfs of 131072 inodes; big and what came before take more): give the sandbox a larger home"}}}}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		since time.Time
		want  string
		is    error
	}{
		{"never pull", waiting("ErrImageNeverPull", ""), long, "is not on the node node1 and ImagePullPolicy is Never", sberr.ErrInvalidConfig},
		{"pull", waiting("ImagePullBackOff", "Back-off pulling image"), long, "could not be pulled (ImagePullBackOff: Back-off pulling image); load it", sberr.ErrInvalidConfig},
		{"full", unsched, long, `no node has room for the sandbox's pod now: the scheduler says "0/1 nodes are available: 1 Insufficient memory."`, sberr.ErrNoRoom},
		{"full, elsewhere no match", unschedWith("0/3 nodes are available: 1 Too many pods, 2 node(s) didn't match Pod's node affinity/selector."), long, "no node has room", sberr.ErrNoRoom},
		{"no match", unschedWith("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."), long, "no node can run the sandbox's pod", sberr.ErrInvalidConfig},
		{"taint", unschedWith("0/1 nodes are available: 1 node(s) had untolerated taint {gpu: true}."), long, "no node can run the sandbox's pod", sberr.ErrInvalidConfig},
		{"oom", oom, long, "out of memory (its limit of 512Mi, OOMKilled)", sberr.ErrUnavailable},
		{"evicted", evicted, long, "evicted from its node: The node was low on resource: memory.", sberr.ErrUnavailable},
		{"old agent", oldAgent, long, "looks older than this program", sberr.ErrUnavailable},
		{"home too big", bigHome, long, "does not fit the sandbox's home", sberr.ErrInvalidConfig},
		{"config", waiting("CreateContainerConfigError", `secret "x" not found`), long, "could not start the sandbox's container (CreateContainerConfigError)", sberr.ErrUnavailable},
	} {
		err := podFailure(tc.pod, tc.since)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.is) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if err := podFailure(unsched, time.Now()); err != nil {
		t.Errorf("unschedulable within the grace: %v", err)
	}
	if err := podFailure(waiting("ContainerCreating", ""), long); err != nil {
		t.Errorf("creating: %v", err)
	}
}

func TestDead(t *testing.T) {
	p := podFor(testPlan(), meta{id: "kabcdefghijklmnop", lifetime: time.Hour}, time.Now().Add(-time.Minute))
	if !dead(p, time.Now()) {
		t.Error("expired pod not dead")
	}
	p = podFor(testPlan(), meta{id: "kabcdefghijklmnop", lifetime: time.Hour}, time.Now().Add(time.Minute))
	p.CreationTimestamp = metav1.Now()
	if dead(p, time.Now()) {
		t.Error("live pod dead")
	}
	p.Status.Phase = corev1.PodSucceeded
	if !dead(p, time.Now()) {
		t.Error("ended pod not dead")
	}
	// Stuck starting long after any Create would have given up.
	stuck := podFor(testPlan(), meta{id: "kabcdefghijklmnop", lifetime: time.Hour}, time.Now().Add(time.Hour))
	stuck.CreationTimestamp = metav1.NewTime(time.Now().Add(-10 * time.Minute))
	if !dead(stuck, time.Now()) {
		t.Error("a pod stuck starting is not dead")
	}
	now := metav1.Now()
	p.DeletionTimestamp = &now
	if dead(p, time.Now()) {
		t.Error("a pod being deleted is swept again")
	}
}

// TestRBAC keeps deploy/kubernetes/rbac.yaml in step with what the
// variant calls.
func TestRBAC(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	for _, doc := range strings.Split(string(raw), "\n---") {
		var obj struct {
			Kind     string              `json:"kind"`
			Metadata metav1.ObjectMeta   `json:"metadata"`
			Rules    []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("rbac.yaml: %v", err)
		}
		if obj.Kind == "Role" && obj.Metadata.Namespace == "code-sandboxes" {
			rules = append(rules, obj.Rules...)
		}
	}
	need := map[string][]string{
		"/pods":                             {"create", "get", "list", "watch", "patch", "delete"},
		"/pods/portforward":                 {"create", "get"},
		"/secrets":                          {"create", "get", "list", "patch", "delete"},
		"/events":                           {"list"},
		"networking.k8s.io/networkpolicies": {"create", "list", "patch", "delete"},
	}
	for res, verbs := range need {
		group, name, _ := strings.Cut(res, "/")
		for _, v := range verbs {
			ok := slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
				return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, name) && slices.Contains(r.Verbs, v)
			})
			if !ok {
				t.Errorf("the Role lacks %s on %s", v, res)
			}
		}
	}
}

// Isolation gvisor is a RuntimeClass: "gvisor" unless Options name one.
func TestRuntimeClassForIsolation(t *testing.T) {
	for _, c := range []struct {
		isolation, option, want string
	}{{"", "", ""}, {"", "kata", "kata"}, {"gvisor", "", "gvisor"}, {"gvisor", "gvisor-kvm", "gvisor-kvm"}} {
		got, err := runtimeClassFor(driver.Spec{Isolation: c.isolation}, Options{RuntimeClassName: c.option})
		if err != nil || got != c.want {
			t.Errorf("isolation %q, RuntimeClassName %q: %q %v, want %q", c.isolation, c.option, got, err, c.want)
		}
	}
	if _, err := runtimeClassFor(driver.Spec{Isolation: "vm"}, Options{}); !errors.Is(err, sberr.ErrInvalidConfig) {
		t.Errorf("isolation vm: %v, want ErrInvalidConfig", err)
	}
	p := testPlan()
	p.runtimeClass = "gvisor"
	pod := podFor(p, meta{id: "kabcdefghijklmnop", lifetime: time.Hour}, time.Now().Add(time.Hour))
	if rc := pod.Spec.RuntimeClassName; rc == nil || *rc != "gvisor" {
		t.Errorf("pod RuntimeClassName %v, want gvisor", rc)
	}
	if pod := podFor(testPlan(), meta{id: "kabcdefghijklmnop", lifetime: time.Hour}, time.Now().Add(time.Hour)); pod.Spec.RuntimeClassName != nil {
		t.Errorf("pod without isolation: RuntimeClassName %q, want none", *pod.Spec.RuntimeClassName)
	}
}

// A volume is a PersistentVolumeClaim of the namespace, mounted at its
// path; a source that can't name a claim is refused.
func TestPodForVolumes(t *testing.T) {
	p := testPlan()
	p.volumes = []driver.Volume{{Source: "team-data", Path: "/mnt/data"}}
	pod := podFor(p, meta{id: "kabcdefghijklmnop", lifetime: time.Hour}, time.Now().Add(time.Hour))
	var claim string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.Name + "=" + v.PersistentVolumeClaim.ClaimName
		}
	}
	var mount string
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.MountPath == "/mnt/data" {
			mount = m.Name
			if m.ReadOnly {
				t.Error("mounted read-only")
			}
		}
	}
	if claim != "vol0=team-data" || mount != "vol0" {
		t.Fatalf("claim %q mount %q", claim, mount)
	}
	_, err := Variant{}.Create(context.Background(), driver.Spec{Variant: "kubernetes", Volumes: []driver.Volume{{Source: "/host/dir", Path: "/mnt/x"}}})
	if !errors.Is(err, sberr.ErrInvalidConfig) || !strings.Contains(err.Error(), "PersistentVolumeClaim") {
		t.Fatalf("a host path as the source: %v", err)
	}
}
