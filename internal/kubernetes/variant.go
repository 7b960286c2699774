// Package kubernetes is the kubernetes variant: each sandbox is a pod, made
// through client-go on any cluster, whose only process is our agent (an
// image made by `code-sandboxes environments export` carries it). The host
// reaches the agent through the API server's port-forward, so the pod
// needs no Service, no Ingress and no reachable IP; labels and annotations
// on the pod let any process list, reach and kill sandboxes; a Secret per
// sandbox holds its access token and environment; a NetworkPolicy per
// sandbox, on clusters that enforce them, holds its network in.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/egress"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/ids"
	"github.com/code-sandboxes/code-sandboxes/internal/pipinstall"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// defaultEnvironment is what a sandbox runs when Config.Environment and
// Kubernetes.Image are empty.
const defaultEnvironment = "python"

// Variant is the kubernetes variant.
type Variant struct{}

// Name implements driver.Variant.
func (Variant) Name() string { return "kubernetes" }

// Capabilities implements driver.Variant. Network none and allowlist are
// listed because the variant can give them; Create refuses them on a
// cluster not known to enforce NetworkPolicy.
func (Variant) Capabilities() driver.Capabilities {
	return driver.Capabilities{Interrupt: true, Variables: true, Host: true, Commands: true, Files: true,
		Watch: true, SetTimeout: true, Networks: []string{"none", "all", "allowlist"}, Limits: true, Packages: true, IdleTimeout: true,
		Isolations: []string{isolationGVisor}}
}

const (
	isolationGVisor = "gvisor"
	// gvisorRuntimeClass is the RuntimeClass isolation gvisor asks for
	// when Options.RuntimeClassName names none: the name gVisor's own
	// documentation and GKE Sandbox use.
	gvisorRuntimeClass = "gvisor"
)

// runtimeClassFor is the pod's RuntimeClass: Options.RuntimeClassName, or
// for isolation gvisor the class named gvisor (a cluster that lacks it
// leaves the pod unschedulable, reported with the scheduler's reason).
func runtimeClassFor(spec driver.Spec, k Options) (string, error) {
	switch spec.Isolation {
	case "", "namespaces":
		return k.RuntimeClassName, nil
	case isolationGVisor:
		if k.RuntimeClassName != "" {
			return k.RuntimeClassName, nil
		}
		return gvisorRuntimeClass, nil
	}
	return "", fmt.Errorf("%w: unknown isolation %q; use namespaces or gvisor", sberr.ErrInvalidConfig, spec.Isolation)
}

// Environments implements driver.Variant: the store's builds that can be
// exported as images (not host builds). The variant never builds one
// itself: its pods run images, which must be exported and loaded.
func (Variant) Environments(ctx context.Context, spec driver.Spec) ([]driver.Environment, error) {
	st, err := environment.Open(spec.EnvironmentDir)
	if err != nil {
		return nil, err
	}
	builds, err := st.List()
	if err != nil {
		return nil, err
	}
	byID := map[string]*environment.Build{}
	for _, b := range builds {
		byID[b.ID] = b
	}
	var out []driver.Environment
	for name, id := range st.Names() {
		b := byID[id]
		if b == nil || b.Host {
			continue
		}
		desc := b.Description
		if desc == "" {
			desc = b.Base
		}
		out = append(out, driver.Environment{Name: name, Variant: "kubernetes", BuildID: id,
			Description: desc + " (image " + environment.ImageTag(b) + ", loaded with `code-sandboxes environments export`)"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// network resolves the network policy. Every policy is a NetworkPolicy
// (all too: it keeps the sandbox from the cluster's own ranges, as local
// keeps it from the host's), so every policy needs a cluster that enforces
// them: known to (asserted, or a policy plugin's pods seen), proven to by
// an earlier sandbox (verify false), or to be proven by this one's pod
// (verify true: see launchVerified). A cluster proven not to is refused.
// The default is "none", as on every variant we launch.
func (c *cluster) network(ctx context.Context, spec driver.Spec) (policy string, egress []string, verify bool, err error) {
	policy = spec.Network
	if policy == "" {
		policy = "none"
	}
	if len(spec.DeniedHosts) > 0 {
		// A NetworkPolicy only allows: "everything but these" would be
		// ipBlock excepts, which miss the named exceptions allowed hosts
		// carry; refused rather than half-enforced.
		return "", nil, false, fmt.Errorf("%w: DeniedHosts on the kubernetes variant: a NetworkPolicy can't deny addresses with allowed exceptions by name; use NetworkPolicy allowlist with AllowedHosts (CIDRs), or the local or docker variant", sberr.ErrNotSupported)
	}
	switch policy {
	case "all", "none":
	case "allowlist":
		if egress, err = egressPeers(spec.AllowedHosts); err != nil {
			return "", nil, false, err
		}
	default:
		return "", nil, false, fmt.Errorf("%w: network policy %q", sberr.ErrInvalidConfig, policy)
	}
	opts, err := optionsOf(spec)
	if err != nil {
		return "", nil, false, err
	}
	switch state, why := c.policyEnforced(ctx, opts.NetworkPolicyEnforced); state {
	case enforced:
		return policy, egress, false, nil
	case unknown:
		return policy, egress, true, nil
	default:
		defaulted := ""
		if spec.Network == "" {
			defaulted = " (the default)"
		}
		return "", nil, false, fmt.Errorf("%w: network policy %s%s is a NetworkPolicy on the kubernetes variant, and this cluster does not enforce NetworkPolicy (%s), so the sandbox would reach %s. "+
			"Install a network plugin that enforces NetworkPolicy (Calico, Cilium, kube-router's policy controller …); if it does enforce and the check is wrong, set kubernetes.Options.NetworkPolicyEnforced = true (serve and the CLI: %s=1)",
			sberr.ErrInvalidConfig, policy, defaulted, why, map[string]string{"none": "the network", "allowlist": "more than AllowedHosts", "all": "the cluster's pods, services and nodes"}[policy], EnforcedEnv)
	}
}

// planFor validates spec and resolves everything a pod needs. Nothing is
// built: the variant runs images, which the user exports and loads.
func planFor(ctx context.Context, spec driver.Spec) (*plan, error) {
	k, err := optionsOf(spec)
	if err != nil {
		return nil, err
	}
	if spec.Pids > 0 {
		return nil, fmt.Errorf("%w: Pids: Kubernetes has no per-pod pids limit (the kubelet's podPidsLimit applies to every pod on a node); leave Pids 0 and ask the cluster's admin for podPidsLimit", sberr.ErrInvalidConfig)
	}
	if k.WarmPool < 0 {
		return nil, fmt.Errorf("%w: kubernetes.Options.WarmPool must be 0 or more, got %d", sberr.ErrInvalidConfig, k.WarmPool)
	}
	pp, err := pullPolicy(k.ImagePullPolicy)
	if err != nil {
		return nil, err
	}
	tol, err := tolerations(k.Tolerations)
	if err != nil {
		return nil, err
	}
	for _, p := range spec.Packages {
		if p == "" || strings.HasPrefix(p, "-") || strings.ContainsAny(p, " \t\r\n\x00") {
			return nil, fmt.Errorf("%w: package %q: give a requirement such as name or name==1.2 (no options, no spaces)", sberr.ErrInvalidConfig, p)
		}
	}
	rc, err := runtimeClassFor(spec, k)
	if err != nil {
		return nil, err
	}
	p := &plan{pullPolicy: pp, runtimeClass: rc, userns: k.UserNamespaces, nodeSelector: k.NodeSelector, tolerations: tol,
		memory: spec.Memory(), cpus: spec.CPUs, workdir: spec.WorkingDir, prewarm: len(spec.Packages) == 0}
	if p.workdir == "" {
		p.workdir = "/home/user"
	}
	env := map[string]string{}
	if k.Image != "" {
		p.image = k.Image
	} else {
		name := spec.Environment
		if name == "" {
			name = defaultEnvironment
		}
		st, err := environment.Open(spec.EnvironmentDir)
		if err != nil {
			return nil, err
		}
		b, err := st.Resolve(name)
		if errors.Is(err, environment.ErrNotFound) {
			return nil, fmt.Errorf("%w: environment %q is not built on this machine, and the kubernetes variant runs images, which it doesn't build: "+
				"build it (`code-sandboxes environments build %s`, or `-f spec.yaml`), export it (`code-sandboxes environments export %s -o env.tar`) and load env.tar into the cluster "+
				"(`kind load image-archive env.tar`, `ctr -n k8s.io images import env.tar`, or a registry plus kubernetes.Options.Image): %w",
				sberr.ErrInvalidConfig, name, name, name, err)
		}
		if err != nil {
			return nil, err
		}
		if b.Host {
			return nil, fmt.Errorf("%w: environment %q is a host environment (the host's own system directories), which only the local variant can run; give the kubernetes variant an environment with a rootfs", sberr.ErrInvalidConfig, name)
		}
		p.image, p.environment = environment.ImageTag(b), name
		for k, v := range b.Env {
			env[k] = v
		}
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	p.env = env
	c, err := connect(spec)
	if err != nil {
		return nil, err
	}
	p.c = c
	if p.network, p.egress, p.verify, err = c.network(ctx, spec); err != nil {
		return nil, err
	}
	p.allowPrivate = spec.AllowPrivate
	if len(spec.Packages) > 0 && p.network != "all" {
		return nil, fmt.Errorf("%w: Packages are pip-installed inside the sandbox, which needs network to reach the package index; set NetworkPolicy all (or use an image that has them)", sberr.ErrInvalidConfig)
	}
	return p, nil
}

// Create implements driver.Variant.
func (v Variant) Create(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	p, err := planFor(ctx, spec)
	if err != nil {
		return nil, err
	}
	go p.c.sweep(context.WithoutCancel(ctx))
	m := meta{name: spec.Name, tags: spec.Tags, lifetime: spec.Lifetime, idle: spec.IdleTimeout}
	if opts, _ := optionsOf(spec); opts.WarmPool > 0 && len(spec.Packages) == 0 { // planFor checked them
		inst, err := pools.get(p, opts.WarmPool).take(ctx, m)
		if inst != nil || err != nil {
			return inst, err
		}
	}
	m.id = ids.Sandbox('k')
	inst, err := p.c.launch(ctx, p, m)
	if err != nil {
		return nil, err
	}
	if len(spec.Packages) > 0 {
		if err := pipinstall.Install(ctx, inst.cl, "", spec.PackageIndex, spec.Packages, spec.WorkingDir); err != nil {
			_ = inst.Kill(context.WithoutCancel(ctx))
			_ = inst.Release()
			return nil, err
		}
	}
	return inst, nil
}

// launch makes a sandbox's Secret, NetworkPolicy and pod, and returns when
// its agent answers; on any failure it deletes what it made.
func (c *cluster) launch(ctx context.Context, p *plan, m meta) (inst *instance, err error) {
	token := ids.Token(32)
	endAt := time.Now().Add(m.lifetime)
	secret, err := secretFor(p, m, token)
	if err != nil {
		return nil, err
	}
	made := false
	defer func() {
		if err != nil && made {
			// Nothing left behind after a failed create.
			if inst != nil {
				_ = inst.Release()
				inst = nil
			}
			_ = c.deleteSandbox(context.WithoutCancel(ctx), m.id)
		}
	}()
	cctx, cancel := callCtx(ctx)
	defer cancel()
	if _, err := c.cs.CoreV1().Secrets(c.namespace).Create(cctx, secret, metav1.CreateOptions{}); err != nil {
		return nil, apiError("creating the sandbox's secret", err, c.namespace)
	}
	made = true
	if !p.verify {
		// Before the pod, so that it never runs unconfined.
		if _, err := c.cs.NetworkingV1().NetworkPolicies(c.namespace).Create(cctx, networkPolicyFor(p, m, ""), metav1.CreateOptions{}); err != nil {
			return nil, apiError("creating the sandbox's network policy", err, c.namespace)
		}
	}
	pod, err := c.createPod(cctx, podFor(p, m, endAt))
	if err != nil {
		return nil, err
	}
	// The pod owns its Secret and NetworkPolicy, so the garbage collector
	// removes them with it whoever deletes it.
	c.adopt(cctx, pod, !p.verify)
	inst, err = newInstance(c, m.id, token)
	if err != nil {
		return nil, err
	}
	// The deadline counts from the pod's start, which is a little after
	// its creation: counting from creation errs on the safe side.
	inst.started = pod.CreationTimestamp.Time
	ready, err := c.waitReady(ctx, pod.Name, inst.probe)
	if err != nil {
		return inst, err
	}
	hostIP := ready.Status.HostIP
	if p.verify {
		return inst, c.launchVerified(ctx, inst, p, m, pod, hostIP)
	}
	if ip, err := netip.ParseAddr(hostIP); p.network == "all" && err == nil && !covered(egress.Unreachable(p.allowPrivate), ip) {
		// A node outside the excluded ranges (a public address): the
		// policy excludes it too, now that the pod has one.
		if err := c.replacePolicy(ctx, networkPolicyFor(p, m, hostIP)); err != nil {
			return inst, err
		}
	}
	if err := inst.waitEnforced(ctx, hostIP, p.egress); err != nil {
		return inst, err
	}
	return inst, nil
}

// launchVerified proves, with the new sandbox's own pod, that the cluster
// enforces NetworkPolicy when nothing said so (a policy plugin that runs
// as a host daemon, as kube-router does on the project's test cluster): the
// pod started with no policy, and only our agent runs in it, no user code
// yet. The node's kubelet port answers it now; then its policy is created,
// and it must stop answering within enforceTimeout. The verdict is kept
// for the cluster (enforcementTTL); either way nothing is returned to the
// caller before the policy holds.
func (c *cluster) launchVerified(ctx context.Context, inst *instance, p *plan, m meta, pod *corev1.Pod, hostIP string) error {
	ip, err := netip.ParseAddr(hostIP)
	reached := false
	if err == nil {
		reached, err = inst.reaches(ctx, hostIP, kubeletPort)
	}
	if err != nil || !reached {
		return fmt.Errorf("%w: this cluster is not known to enforce NetworkPolicy, and the sandbox's pod could not prove it does (it could not reach its node %q's kubelet port before its policy existed: %v); "+
			"if the cluster's network plugin enforces NetworkPolicy, set kubernetes.Options.NetworkPolicyEnforced = true (serve and the CLI: %s=1); the sandbox was removed",
			sberr.ErrInvalidConfig, hostIP, err, EnforcedEnv)
	}
	np := networkPolicyFor(p, m, hostIP)
	np.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
	cctx, cancel := callCtx(ctx)
	defer cancel()
	if _, err := c.cs.NetworkingV1().NetworkPolicies(c.namespace).Create(cctx, np, metav1.CreateOptions{}); err != nil {
		return apiError("creating the sandbox's network policy", err, c.namespace)
	}
	if err := inst.waitEnforced(ctx, ip.String(), p.egress); err != nil {
		if ctx.Err() == nil {
			c.recordEnforcement(notEnforced, fmt.Sprintf("a sandbox's pod still reached its node's kubelet port %s after its NetworkPolicy was created", enforceTimeout))
		}
		return err
	}
	c.recordEnforcement(enforced, "a sandbox's pod reached its node's kubelet port until its NetworkPolicy was created, and not after")
	return nil
}

// replacePolicy updates the sandbox's NetworkPolicy to np.
func (c *cluster) replacePolicy(ctx context.Context, np *networkingv1.NetworkPolicy) error {
	cctx, cancel := callCtx(ctx)
	defer cancel()
	cur, err := c.cs.NetworkingV1().NetworkPolicies(c.namespace).Get(cctx, np.Name, metav1.GetOptions{})
	if err != nil {
		return apiError("reading the sandbox's network policy", err, c.namespace)
	}
	cur.Spec = np.Spec
	if _, err := c.cs.NetworkingV1().NetworkPolicies(c.namespace).Update(cctx, cur, metav1.UpdateOptions{}); err != nil {
		return apiError("updating the sandbox's network policy", err, c.namespace)
	}
	return nil
}

// createPod creates the pod. A namespace made a moment ago has no default
// ServiceAccount yet (the controller-manager adds it within seconds), and
// admission refuses pods until it has: that one refusal is waited out.
func (c *cluster) createPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		made, err := c.cs.CoreV1().Pods(c.namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			return made, nil
		}
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "serviceaccount") && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
				continue
			}
		}
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "serviceaccount") {
			return nil, fmt.Errorf("%w: creating the sandbox's pod: namespace %q has no default ServiceAccount (%v); the cluster's controller-manager creates one in every namespace",
				sberr.ErrUnavailable, c.namespace, err)
		}
		return nil, apiError("creating the sandbox's pod", err, c.namespace)
	}
}

// adopt makes pod the owner of its Secret (and NetworkPolicy); best
// effort, deleteSandbox and the orphan sweep remove them anyway.
func (c *cluster) adopt(ctx context.Context, pod *corev1.Pod, policy bool) {
	patch := fmt.Appendf(nil, `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":%q,"uid":%q}]}}`, pod.Name, pod.UID)
	_, _ = c.cs.CoreV1().Secrets(c.namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if policy {
		_, _ = c.cs.NetworkingV1().NetworkPolicies(c.namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
}

// Connect implements driver.Variant: a new handle on a running sandbox,
// with the token from its Secret.
func (Variant) Connect(ctx context.Context, id string, spec driver.Spec) (driver.Instance, error) {
	if !idRE.MatchString(id) {
		return nil, fmt.Errorf("sandbox %q: %w on variant kubernetes", id, sberr.ErrNotFound)
	}
	c, err := connect(spec)
	if err != nil {
		return nil, err
	}
	gctx, cancel := callCtx(ctx)
	defer cancel()
	pod, err := c.cs.CoreV1().Pods(c.namespace).Get(gctx, podName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && (pod.Labels[labelCreatedBy] != createdBy || pod.Labels[labelID] != id)) {
		return nil, fmt.Errorf("sandbox %s: %w (it expired or was killed)", id, sberr.ErrNotFound)
	}
	if err != nil {
		return nil, apiError("reading sandbox "+id, err, c.namespace)
	}
	// A pod still "starting" may already answer (its status lags the
	// container); the agent decides below.
	if st := status(pod); dead(pod, time.Now()) || pod.DeletionTimestamp != nil {
		return nil, fmt.Errorf("sandbox %s: %w (it is %s)", id, sberr.ErrNotFound, st)
	}
	secret, err := c.cs.CoreV1().Secrets(c.namespace).Get(gctx, podName(id), metav1.GetOptions{})
	if err != nil {
		return nil, apiError("reading sandbox "+id+"'s access token", err, c.namespace)
	}
	token := string(secret.Data[secretKeyToken])
	if token == "" {
		return nil, fmt.Errorf("%w: sandbox %s's secret has no token", sberr.ErrUnavailable, id)
	}
	inst, err := newInstance(c, id, token)
	if err != nil {
		return nil, err
	}
	hctx, hcancel := context.WithTimeout(ctx, agentTimeout)
	defer hcancel()
	info, err := inst.cl.Info(hctx)
	if err == nil && info.ID != id {
		err = fmt.Errorf("%w: the agent in pod %s says it is sandbox %q", sberr.ErrUnavailable, pod.Name, info.ID)
	}
	if err != nil {
		_ = inst.Release()
		return nil, fmt.Errorf("reaching sandbox %s: %w", id, err)
	}
	return inst, nil
}

// List implements driver.Variant: the namespace's running and starting
// sandboxes (not warm-pool pods), filtered on the server by the labels it
// can, and exactly by the annotations.
func (Variant) List(ctx context.Context, spec driver.Spec, f driver.Filter) ([]driver.Info, error) {
	c, err := connect(spec)
	if err != nil {
		return nil, err
	}
	sel := labels.Set{}
	if f.ID != "" {
		if !idRE.MatchString(f.ID) {
			return nil, nil
		}
		sel[labelID] = f.ID
	}
	if l := sanitizeLabel(f.Name); f.Name != "" && l == f.Name {
		sel[labelName] = l
	}
	for k, v := range f.Tags {
		if lk, ok := tagLabel(k, v); ok {
			sel[lk] = v
		}
	}
	pods, err := c.ourPods(ctx, sel, false, false)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []driver.Info
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || dead(p, now) {
			continue
		}
		info := infoOf(p)
		if f.Match(info) {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Sweep implements driver.Sweeper: it deletes the dead pods (and their
// Secrets and NetworkPolicies) in the background and returns their number.
func (Variant) Sweep(ctx context.Context, spec driver.Spec) (int, error) {
	c, err := connect(spec)
	if err != nil {
		return 0, err
	}
	return c.sweep(ctx), nil
}

// Kill implements driver.Variant.
func (Variant) Kill(ctx context.Context, spec driver.Spec, id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("sandbox %q: %w on variant kubernetes", id, sberr.ErrNotFound)
	}
	c, err := connect(spec)
	if err != nil {
		return err
	}
	return c.deleteSandbox(ctx, id)
}
