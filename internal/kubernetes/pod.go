package kubernetes

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/egress"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Labels select; annotations carry what labels can't hold (any name, tags
// whose keys or values aren't label-shaped, times).
const (
	labelCreatedBy = "created-by"
	createdBy      = "code-sandboxes"
	labelID        = "code-sandboxes.id"
	labelName      = "code-sandboxes.name" // sanitised; the annotation is exact
	labelPool      = "code-sandboxes.pool" // "true" on warm-pool pods not yet handed out
	labelPoolKey   = "code-sandboxes.pool-key"
	tagLabelPrefix = "tag.code-sandboxes/"

	annName    = "code-sandboxes.name"
	annTags    = "code-sandboxes.tags"   // JSON object
	annEndAt   = "code-sandboxes.end-at" // RFC 3339; the agent ends itself then
	annNetwork = "code-sandboxes.network"
	annEnv     = "code-sandboxes.environment"
)

// The pod's layout.
const (
	containerName = "sandbox"
	// agentPort is where the agent listens, on the pod's loopback only.
	agentPort = 49983
	// roleEnv/roleAgent make a code-sandboxes binary (the CLI, or any
	// program built on the package) run the standalone agent; the
	// code-sandboxes-agent binary ignores them and is the agent anyway.
	roleEnv        = "CODE_SANDBOXES_ROLE"
	roleAgent      = "pod-agent"
	roleProbe      = "pod-probe"            // standalone.ProbeConnect: enforce.go
	tokenEnv       = "CODE_SANDBOXES_TOKEN" // standalone.TokenEnv
	envEnv         = "CODE_SANDBOXES_ENV"   // standalone.EnvEnv
	secretKeyToken = "token"
	secretKeyEnv   = "env"

	sandboxUID = 1000
	sandboxGID = 100
	// Sizes of the memory-backed volumes, as on the other variants (they
	// count against the pod's memory limit).
	tmpSize   = 512 << 20
	homeSize  = 1 << 30
	filesSize = 1 << 30
	// deadlineGrace: activeDeadlineSeconds backs the agent's own lifetime
	// up, a little later, so that the agent normally ends first.
	deadlineGrace = 30 * time.Second
)

// plan is everything a pod of a sandbox is made from, resolved and
// validated: two sandboxes with equal plans can share a warm pool.
type plan struct {
	c            *cluster
	image        string
	pullPolicy   corev1.PullPolicy
	environment  string // the environment's name, for display ("" with a custom image)
	env          map[string]string
	workdir      string
	network      string // none | all | allowlist
	egress       []string
	allowPrivate bool // network all may reach the private ranges
	// verify: the cluster is not known to enforce NetworkPolicy; launch
	// proves it does with this pod (see launchVerified) or refuses.
	verify       bool
	memory       int64
	cpus         float64
	runtimeClass string
	userns       bool // hostUsers: false
	nodeSelector map[string]string
	tolerations  []corev1.Toleration
	prewarm      bool
	// volumes: PersistentVolumeClaims (Source: the claim's name in the
	// namespace) mounted read-write at their paths.
	volumes []driver.Volume
}

// key identifies plans that make interchangeable pods.
func (p *plan) key() string {
	b, _ := json.Marshal([]any{p.c.key, p.c.namespace, p.image, p.pullPolicy, p.env, p.workdir, p.network, p.egress, p.allowPrivate,
		p.memory, p.cpus, p.runtimeClass, p.nodeSelector, p.tolerations, p.prewarm, p.userns, p.volumes})
	return string(b)
}

// meta is what differs between sandboxes of one plan.
type meta struct {
	id, name string
	tags     map[string]string
	lifetime time.Duration
	idle     time.Duration // idle timeout; 0 = none (always for pool pods)
	pool     string        // pool key hash for warm-pool pods, else ""
}

func podName(id string) string { return "code-sandboxes-" + id }

var idRE = regexp.MustCompile(`^k[a-z0-9]{16}$`)

// pullPolicy validates kubernetes.Options.ImagePullPolicy.
func pullPolicy(s string) (corev1.PullPolicy, error) {
	switch strings.ToLower(s) {
	case "", "ifnotpresent":
		return corev1.PullIfNotPresent, nil
	case "always":
		return corev1.PullAlways, nil
	case "never":
		return corev1.PullNever, nil
	}
	return "", fmt.Errorf("%w: kubernetes.Options.ImagePullPolicy %q: use Always, IfNotPresent (default) or Never", sberr.ErrInvalidConfig, s)
}

func tolerations(in []Toleration) ([]corev1.Toleration, error) {
	var out []corev1.Toleration
	for _, t := range in {
		ct := corev1.Toleration{Key: t.Key, Value: t.Value, TolerationSeconds: t.TolerationSeconds}
		switch t.Operator {
		case "", "Equal":
			ct.Operator = corev1.TolerationOpEqual
		case "Exists":
			ct.Operator = corev1.TolerationOpExists
		default:
			return nil, fmt.Errorf("%w: toleration operator %q: use Equal or Exists", sberr.ErrInvalidConfig, t.Operator)
		}
		switch t.Effect {
		case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
			ct.Effect = corev1.TaintEffect(t.Effect)
		default:
			return nil, fmt.Errorf("%w: toleration effect %q: use NoSchedule, PreferNoSchedule or NoExecute", sberr.ErrInvalidConfig, t.Effect)
		}
		out = append(out, ct)
	}
	return out, nil
}

// egressPeers turns AllowedHosts into NetworkPolicy peers. NetworkPolicy
// matches addresses, not names, so host names are refused rather than
// resolved once here and silently stale later.
func egressPeers(hosts []string) ([]string, error) {
	var out []string
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if pfx, err := netip.ParsePrefix(h); err == nil {
			out = append(out, pfx.Masked().String())
			continue
		}
		if a, err := netip.ParseAddr(h); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()).String())
			continue
		}
		return nil, fmt.Errorf("%w: allowed host %q: the kubernetes variant's allowlist is a NetworkPolicy, which matches IP addresses and CIDR blocks only, not names; give addresses (such as 151.101.0.223 or 151.101.0.0/16) or use the local variant, whose allowlist proxy matches names", sberr.ErrInvalidConfig, h)
	}
	sort.Strings(out)
	return out, nil
}

// sanitizeLabel makes s a valid label value (at most 63 characters of
// [A-Za-z0-9._-], alphanumeric at both ends), or "".
func sanitizeLabel(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	out := string(b)
	if len(out) > 63 {
		out = out[:63]
	}
	return strings.Trim(out, "._-")
}

// tagLabel is the label that carries a tag, when key and value are
// label-shaped (then List filters on the server).
func tagLabel(k, v string) (string, bool) {
	key := tagLabelPrefix + k
	if len(content.IsLabelKey(key)) > 0 || len(content.IsLabelValue(v)) > 0 {
		return "", false
	}
	return key, true
}

func objectMeta(p *plan, m meta, endAt time.Time) metav1.ObjectMeta {
	labels := map[string]string{labelCreatedBy: createdBy, labelID: m.id}
	ann := map[string]string{annEndAt: endAt.UTC().Format(time.RFC3339Nano), annNetwork: p.network}
	if p.environment != "" {
		ann[annEnv] = p.environment
	}
	if m.pool != "" {
		labels[labelPool] = "true"
		labels[labelPoolKey] = m.pool
	} else {
		setIdentity(labels, ann, m.name, m.tags)
	}
	return metav1.ObjectMeta{Name: podName(m.id), Labels: labels, Annotations: ann}
}

// setIdentity writes a sandbox's name and tags into labels and annotations.
func setIdentity(labels, ann map[string]string, name string, tags map[string]string) {
	if l := sanitizeLabel(name); l != "" {
		labels[labelName] = l
	}
	ann[annName] = name
	if len(tags) > 0 {
		b, _ := json.Marshal(tags)
		ann[annTags] = string(b)
	}
	for k, v := range tags {
		if lk, ok := tagLabel(k, v); ok {
			labels[lk] = v
		}
	}
}

func memoryVolume(name string, size int64) corev1.Volume {
	q := resource.NewQuantity(size, resource.BinarySI)
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: q}}}
}

// activeDeadline is the pod's hard end, in seconds from its start: the
// agent's lifetime plus a grace. (Warm-pool pods get poolDeadline, lowered
// when handed out: the field can never be raised on a running pod.)
func activeDeadline(lifetime time.Duration) *int64 {
	s := int64(math.Ceil((lifetime + deadlineGrace).Seconds()))
	if s > math.MaxInt32 {
		s = math.MaxInt32
	}
	return &s
}

// podFor builds the sandbox's pod: the agent as its only process, as the
// sandbox contract's user, with nothing it doesn't need (no service
// account token, no service links, no capabilities, a read-only root).
func podFor(p *plan, m meta, endAt time.Time) *corev1.Pod {
	t, f := true, false
	args := []string{"--sandbox", "--listen", "tcp:127.0.0.1:" + strconv.Itoa(agentPort), "--id", m.id,
		"--workdir", p.workdir, "--lifetime", m.lifetime.String()}
	if m.idle > 0 {
		args = append(args, "--idle-timeout", m.idle.String())
	}
	if p.prewarm {
		args = append(args, "--prewarm")
	}
	secretRef := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: podName(m.id)}, Key: key}}
	}
	res := corev1.ResourceRequirements{}
	if p.memory > 0 || p.cpus > 0 {
		res.Limits, res.Requests = corev1.ResourceList{}, corev1.ResourceList{}
	}
	if p.memory > 0 {
		q := resource.NewQuantity(p.memory, resource.BinarySI)
		res.Limits[corev1.ResourceMemory], res.Requests[corev1.ResourceMemory] = *q, *q
	}
	if p.cpus > 0 {
		q := resource.NewMilliQuantity(int64(math.Ceil(p.cpus*1000)), resource.DecimalSI)
		res.Limits[corev1.ResourceCPU], res.Requests[corev1.ResourceCPU] = *q, *q
	}
	uid, gid := int64(sandboxUID), int64(sandboxGID)
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: objectMeta(p, m, endAt),
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			Hostname:                      "sandbox",
			NodeSelector:                  p.nodeSelector,
			Tolerations:                   p.tolerations,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: &uid, RunAsGroup: &gid, FSGroup: &gid, RunAsNonRoot: &t,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           p.image,
				ImagePullPolicy: p.pullPolicy,
				Command:         []string{environment.AgentPath},
				Args:            args,
				Env: []corev1.EnvVar{
					{Name: roleEnv, Value: roleAgent},
					{Name: tokenEnv, ValueFrom: secretRef(secretKeyToken)},
					{Name: envEnv, ValueFrom: secretRef(secretKeyEnv)},
				},
				Resources: res,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &f, Privileged: &f, ReadOnlyRootFilesystem: &t, RunAsNonRoot: &t,
					RunAsUser: &uid, RunAsGroup: &gid,
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "home", MountPath: "/home/user"},
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "files", MountPath: "/files"},
				},
				// An agent that dies at start explains itself in its
				// output; this puts the tail of it in the pod's status.
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{memoryVolume("home", homeSize), memoryVolume("tmp", tmpSize), memoryVolume("files", filesSize)},
		},
	}
	for i, v := range p.volumes {
		name := "vol" + strconv.Itoa(i)
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Source}}})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: name, MountPath: v.Path})
	}
	if p.runtimeClass != "" {
		rc := p.runtimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	if p.userns {
		// Its own user namespace: the pod's uids map to a range of the
		// node's that no other pod (and no node user) has.
		pod.Spec.HostUsers = &f
	}
	if m.pool == "" {
		pod.Spec.ActiveDeadlineSeconds = activeDeadline(m.lifetime)
	} else {
		d := int64(poolDeadline / time.Second)
		pod.Spec.ActiveDeadlineSeconds = &d
	}
	return pod
}

// secretFor holds what only the agent (and whoever may read the
// namespace's secrets) should see: the access token and the sandbox's
// environment variables, which may carry the user's credentials.
func secretFor(p *plan, m meta, token string) (*corev1.Secret, error) {
	env := p.env
	if env == nil {
		env = map[string]string{}
	}
	raw, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	t := true
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: podName(m.id), Labels: map[string]string{labelCreatedBy: createdBy, labelID: m.id}},
		Immutable:  &t,
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{secretKeyToken: []byte(token), secretKeyEnv: raw},
	}, nil
}

// networkPolicyFor is the sandbox's own policy: no ingress (the host
// reaches the agent through port-forward, which enters the pod's loopback
// and is not subject to NetworkPolicy), and egress to nothing ("none"), to
// the allowed blocks ("allowlist"), or ("all") to every address but those
// egress.Unreachable lists — the cluster's pod and service ranges, other
// sandboxes and the nodes among them when they are private, as they are
// on local — and the node (hostIP, once known) plus the cluster's DNS.
func networkPolicyFor(p *plan, m meta, hostIP string) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: podName(m.id), Labels: map[string]string{labelCreatedBy: createdBy, labelID: m.id}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelID: m.id}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
		},
	}
	switch {
	case p.network == "all":
		v4 := &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}
		v6 := &networkingv1.IPBlock{CIDR: "::/0"}
		except := egress.Unreachable(p.allowPrivate)
		if ip, err := netip.ParseAddr(hostIP); err == nil && !covered(except, ip) {
			except = append(except, netip.PrefixFrom(ip, ip.BitLen()))
		}
		for _, e := range except {
			if e.Addr().Is4() {
				v4.Except = append(v4.Except, e.String())
			} else {
				v6.Except = append(v6.Except, e.String())
			}
		}
		udp, tcp, dns := corev1.ProtocolUDP, corev1.ProtocolTCP, intstr.FromInt32(53)
		np.Spec.Egress = append(np.Spec.Egress,
			networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: v4}, {IPBlock: v6}}},
			// Names resolve through the cluster's DNS, whose pods sit in
			// the excluded ranges.
			networkingv1.NetworkPolicyEgressRule{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
			})
	case len(p.egress) > 0:
		rule := networkingv1.NetworkPolicyEgressRule{}
		for _, cidr := range p.egress {
			rule.To = append(rule.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}})
		}
		np.Spec.Egress = append(np.Spec.Egress, rule)
	}
	return np
}

func covered(ps []netip.Prefix, ip netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// infoOf describes a sandbox from its pod.
func infoOf(pod *corev1.Pod) driver.Info {
	i := driver.Info{
		ID: pod.Labels[labelID], Variant: "kubernetes", Name: pod.Annotations[annName],
		Status: status(pod), CreatedAt: pod.CreationTimestamp.Time, Network: pod.Annotations[annNetwork],
		Environment: pod.Annotations[annEnv],
	}
	if raw := pod.Annotations[annTags]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &i.Tags)
	}
	if t, err := time.Parse(time.RFC3339Nano, pod.Annotations[annEndAt]); err == nil {
		i.EndAt = t
	}
	for _, c := range pod.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			i.Memory = q.Value()
		}
		if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
			i.CPUs = float64(q.MilliValue()) / 1000
		}
		// An environment's image pins its build (environment.ImageTag).
		if id, ok := strings.CutPrefix(c.Image, "code-sandboxes-env:"); ok && i.Environment != "" {
			i.BuildID = id
		}
	}
	return i
}

// status maps a pod's state onto the statuses other variants report.
func status(pod *corev1.Pod) string {
	switch {
	case pod.DeletionTimestamp != nil:
		return "stopping"
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || containerEnded(pod):
		return "stopped"
	case pod.Status.Phase == corev1.PodRunning && containerRunning(pod):
		return "running"
	}
	return "starting"
}

func containerRunning(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName && cs.State.Running != nil {
			return true
		}
	}
	return false
}

// containerEnded: the agent has exited (the pod's phase follows a moment
// later; with restartPolicy Never nothing restarts it).
func containerEnded(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName && cs.State.Terminated != nil {
			return true
		}
	}
	return false
}

// endAt reads a pod's expiry annotation (zero when missing or garbled).
func endAt(pod *corev1.Pod) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, pod.Annotations[annEndAt])
	return t
}
