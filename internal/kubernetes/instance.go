package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/forward"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// instance is a handle on one sandbox's pod.
type instance struct {
	c   *cluster
	id  string
	tun *tunnel
	cl  *client.Client
	fw  forward.Set
	// started is when the pod started (activeDeadlineSeconds counts from
	// it).
	started time.Time

	releaseOnce sync.Once
}

// newInstance builds the handle: a protocol client whose every connection
// is a port-forward stream to the agent.
func newInstance(c *cluster, id, token string) (*instance, error) {
	tun, err := newTunnel(c, podName(id), agentPort)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: tun.DialContext,
		// Each connection is a port-forward through the API server and
		// the kubelet: keep a few for reuse, not many per sandbox.
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     60 * time.Second,
		// The agent is plain HTTP on the pod's loopback; the tunnel's
		// security is the API server's TLS and authentication.
		ForceAttemptHTTP2: false,
	}}
	i := &instance{c: c, id: id, tun: tun,
		cl: client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: hc, AccessToken: token})}
	live.add(i)
	return i, nil
}

func (i *instance) ID() string             { return i.id }
func (i *instance) Client() *client.Client { return i.cl }

func (i *instance) notFound() error {
	return fmt.Errorf("sandbox %s: %w (it expired or was killed)", i.id, sberr.ErrNotFound)
}

// probe asks the agent who it is, through the tunnel: an authenticated
// call (/health would answer anyone) that must name this sandbox.
func (i *instance) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := i.cl.Info(ctx)
	switch {
	case errors.Is(err, sberr.ErrUnauthorized):
		return fatalProbe{fmt.Errorf("the sandbox's agent refused its token: %w", err)}
	case err != nil:
		return err
	case info.ID != i.id:
		return fatalProbe{fmt.Errorf("%w: the agent in pod %s says it is sandbox %q, not %s", sberr.ErrUnavailable, podName(i.id), info.ID, i.id)}
	}
	return nil
}

// Info implements driver.Instance, from the pod.
func (i *instance) Info(ctx context.Context) (driver.Info, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	pod, err := i.c.cs.CoreV1().Pods(i.c.namespace).Get(ctx, podName(i.id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return driver.Info{}, i.notFound()
	}
	if err != nil {
		return driver.Info{}, apiError("reading sandbox "+i.id, err, i.c.namespace)
	}
	return infoOf(pod), nil
}

// setTimeoutMargin: SetTimeout keeps the agent's end this far before the
// pod's hard end.
const setTimeoutMargin = 5 * time.Second

// hardEnd is when the kubelet ends the pod whatever the agent says
// (activeDeadlineSeconds from the pod's start); zero when it has none.
func hardEnd(pod *corev1.Pod) time.Time {
	if pod.Spec.ActiveDeadlineSeconds == nil {
		return time.Time{}
	}
	start := pod.CreationTimestamp.Time
	if pod.Status.StartTime != nil {
		start = pod.Status.StartTime.Time
	}
	return start.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second)
}

// SetTimeout implements driver.Instance: the agent restarts its countdown
// and the expiry annotation (what sweeps and Info read) follows. The pod's
// activeDeadlineSeconds, the backstop set at Create from MaxLifetime, can
// only ever be lowered on a running pod, so a sandbox can't be extended
// past it; that is refused rather than promised and then cut short.
func (i *instance) SetTimeout(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: timeout must be positive, got %s", sberr.ErrInvalidInput, d)
	}
	gctx, cancel := callCtx(ctx)
	pod, err := i.c.cs.CoreV1().Pods(i.c.namespace).Get(gctx, podName(i.id), metav1.GetOptions{})
	cancel()
	if apierrors.IsNotFound(err) {
		return i.notFound()
	}
	if err != nil {
		return apiError("reading sandbox "+i.id, err, i.c.namespace)
	}
	end := time.Now().Add(d)
	// The agent should still end first; a few seconds before the kubelet
	// does is enough (the grace covers start-up and clock skew).
	if he := hardEnd(pod); !he.IsZero() && end.After(he.Add(-setTimeoutMargin)) {
		return fmt.Errorf("%w: sandbox %s can live until %s at most: Kubernetes can't raise a running pod's activeDeadlineSeconds, which the kubernetes variant sets from MaxLifetime at Create; create the sandbox with a longer MaxLifetime",
			sberr.ErrInvalidInput, i.id, he.Add(-setTimeoutMargin).UTC().Format(time.RFC3339))
	}
	if _, err := i.cl.SetTimeout(ctx, d); err != nil {
		return err
	}
	return i.c.patchAnnotations(ctx, podName(i.id), map[string]string{annEndAt: end.UTC().Format(time.RFC3339Nano)})
}

// patchAnnotations merges annotations into a pod's.
func (c *cluster) patchAnnotations(ctx context.Context, name string, ann map[string]string) error {
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	ctx, cancel := callCtx(ctx)
	defer cancel()
	_, err = c.cs.CoreV1().Pods(c.namespace).Patch(ctx, name, types.MergePatchType, raw, metav1.PatchOptions{})
	return apiError("updating sandbox "+name, err, c.namespace)
}

// Host implements driver.Instance: a loopback port of this process whose
// connections the agent splices onto port inside the pod, through the
// same port-forward as everything else. It works with network "none" and
// with servers bound to the pod's loopback.
func (i *instance) Host(ctx context.Context, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", fmt.Errorf("%w: port must be 1-65535, got %d", sberr.ErrInvalidInput, port)
	}
	return i.fw.Addr(port, i.cl.DialPort)
}

// Kill implements driver.Instance.
func (i *instance) Kill(ctx context.Context) error {
	i.tun.Close()
	return i.c.deleteSandbox(ctx, i.id)
}

// Release implements driver.Instance.
func (i *instance) Release() error {
	i.releaseOnce.Do(func() {
		i.fw.Close()
		i.tun.Close()
		if tr, ok := i.cl.HTTPClient().Transport.(interface{ CloseIdleConnections() }); ok {
			tr.CloseIdleConnections()
		}
		live.remove(i)
	})
	return nil
}

// live holds this process's open handles by sandbox id, so that killing a
// sandbox (by id, from any handle or none) also cuts this process's
// connections to it at once: the kubelet takes a moment to stop a deleted
// pod, and an open port-forward would keep reaching it until then.
var live = liveSet{m: map[string]map[*instance]bool{}}

type liveSet struct {
	mu sync.Mutex
	m  map[string]map[*instance]bool
}

func (l *liveSet) add(i *instance) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[i.id] == nil {
		l.m[i.id] = map[*instance]bool{}
	}
	l.m[i.id][i] = true
}

func (l *liveSet) remove(i *instance) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m[i.id], i)
	if len(l.m[i.id]) == 0 {
		delete(l.m, i.id)
	}
}

// cut closes the tunnels of every handle on id.
func (l *liveSet) cut(id string) {
	l.mu.Lock()
	var all []*instance
	for i := range l.m[id] {
		all = append(all, i)
	}
	l.mu.Unlock()
	for _, i := range all {
		i.tun.Close()
	}
}
