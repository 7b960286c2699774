package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// cluster is a connection to one API server as one identity, with the
// namespace sandboxes live in. Clients are cached per kubeconfig, context
// and namespace: a clientset is safe for concurrent use, and a new one per
// call would pay a TLS handshake each time.
type cluster struct {
	key       string
	cfg       *rest.Config
	cs        k8s.Interface
	namespace string
	// spdyOnly: the API server refused a WebSocket port-forward once.
	spdyOnly atomic.Bool
}

var (
	clustersMu sync.Mutex
	clusters   = map[string]*cluster{}
)

// connect returns the cluster spec's Options name: Kubeconfig ("" =
// $KUBECONFIG, else ~/.kube/config, else the in-cluster service account),
// Context and Namespace ("" = the context's, else "default").
func connect(ds driver.Spec) (*cluster, error) {
	spec, err := optionsOf(ds)
	if err != nil {
		return nil, err
	}
	key := strings.Join([]string{spec.Kubeconfig, os.Getenv("KUBECONFIG"), spec.Context, spec.Namespace}, "\x00")
	clustersMu.Lock()
	defer clustersMu.Unlock()
	if c := clusters[key]; c != nil {
		return c, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if spec.Kubeconfig != "" {
		rules.ExplicitPath = spec.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: spec.Context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, fmt.Errorf("%w: the kubernetes variant found no cluster: set kubernetes.Options.Kubeconfig or $KUBECONFIG, have ~/.kube/config, or run inside a pod with a service account", sberr.ErrInvalidConfig)
		}
		return nil, fmt.Errorf("%w: kubeconfig: %w", sberr.ErrInvalidConfig, err)
	}
	cfg = rest.CopyConfig(cfg)
	// client-go's default of 5 requests/s would throttle our start-up
	// polls; the API server's own priority and fairness still applies.
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "code-sandboxes"
	ns := spec.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: kubernetes client: %w", sberr.ErrInvalidConfig, err)
	}
	c := &cluster{key: key, cfg: cfg, cs: cs, namespace: ns}
	clusters[key] = c
	return c, nil
}

// apiTimeout bounds one ordinary API call: a wedged API server must not
// hang a caller forever.
const apiTimeout = 30 * time.Second

func callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, apiTimeout)
}

// apiError turns an API error into one a user can act on: quota and RBAC
// refusals say what to ask the cluster's admin for.
func apiError(what string, err error, ns string) error {
	if err == nil {
		return nil
	}
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		return fmt.Errorf("%w: %s: the namespace %q's ResourceQuota is used up (%v); free some sandboxes (code-sandboxes list/delete), lower Memory/CPU, or ask for a larger quota",
			sberr.ErrRateLimited, what, ns, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w: %s: the cluster refused (%v); the identity in your kubeconfig needs the Role in deploy/kubernetes/rbac.yaml in namespace %q (docs/kubernetes.md)",
			sberr.ErrUnauthorized, what, err, ns)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w: %s: the API server did not accept the kubeconfig's credentials: %v", sberr.ErrUnauthorized, what, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %w: %v", what, sberr.ErrNotFound, err)
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %s: %v", sberr.ErrTimeout, what, err)
	case apierrors.IsTooManyRequests(err):
		return fmt.Errorf("%w: %s: %v", sberr.ErrRateLimited, what, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%w: %s: the API server refused the request: %v", sberr.ErrInvalidConfig, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Network plugins known to enforce NetworkPolicy, by the name prefix of
// their node agents' pods in kube-system. Flannel, the bridge plugin and
// kindnet before kind v0.24 don't; a plugin missing here can be asserted
// with kubernetes.Options.NetworkPolicyEnforced.
var enforcingPlugins = []string{"calico-node", "cilium", "anetd", "antrea-agent", "kube-router", "weave-net", "canal", "azure-npm", "romana-agent"}

// enforcementState is what is known of a cluster's NetworkPolicy
// enforcement.
type enforcementState int

const (
	unknown     enforcementState = iota // nothing says: a launch proves it
	enforced                            // asserted, a plugin's pods seen, or proven
	notEnforced                         // proven not to: refused
)

// EnforcedEnv asserts enforcement for serve and the CLI, which have no
// kubernetes.Options of their own ("1" or "true").
const EnforcedEnv = "CODE_SANDBOXES_K8S_NETWORKPOLICY_ENFORCED"

type enforcement struct {
	state enforcementState
	why   string
	at    time.Time
}

// enforcementTTL is how long a verdict holds: a plugin installed or
// removed meanwhile is seen after that.
const enforcementTTL = 5 * time.Minute

var (
	enforcementMu    sync.Mutex
	enforcementCache = map[string]enforcement{}
)

// policyEnforced reports what is known of the cluster's NetworkPolicy
// enforcement, and how it is known (or why it isn't).
func (c *cluster) policyEnforced(ctx context.Context, asserted bool) (enforcementState, string) {
	if asserted {
		return enforced, "kubernetes.Options.NetworkPolicyEnforced is set"
	}
	if v := os.Getenv(EnforcedEnv); v == "1" || v == "true" {
		return enforced, EnforcedEnv + " is set"
	}
	enforcementMu.Lock()
	e, ok := enforcementCache[c.cfg.Host]
	enforcementMu.Unlock()
	if ok && time.Since(e.at) < enforcementTTL {
		return e.state, e.why
	}
	e = c.detectEnforcement(ctx)
	if e.state == enforced {
		c.recordEnforcement(e.state, e.why)
	}
	return e.state, e.why
}

// recordEnforcement keeps a verdict for the cluster.
func (c *cluster) recordEnforcement(state enforcementState, why string) {
	enforcementMu.Lock()
	defer enforcementMu.Unlock()
	enforcementCache[c.cfg.Host] = enforcement{state: state, why: why, at: time.Now()}
}

func (c *cluster) detectEnforcement(ctx context.Context) enforcement {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	pods, err := c.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{Limit: 500})
	if err != nil {
		return enforcement{why: fmt.Sprintf("could not look for a policy-enforcing network plugin in kube-system (%v)", err), at: time.Now()}
	}
	found := map[string]bool{}
	for _, p := range pods.Items {
		for _, prefix := range enforcingPlugins {
			if strings.HasPrefix(p.Name, prefix) && p.Status.Phase == "Running" {
				found[prefix] = true
			}
		}
	}
	if len(found) == 0 {
		return enforcement{why: "no pods of a network plugin known to enforce NetworkPolicy (" + strings.Join(enforcingPlugins, ", ") + ") run in kube-system", at: time.Now()}
	}
	var names []string
	for n := range found {
		names = append(names, n)
	}
	sort.Strings(names)
	return enforcement{state: enforced, why: "the cluster runs " + strings.Join(names, ", "), at: time.Now()}
}
