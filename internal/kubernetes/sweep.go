package kubernetes

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const (
	// sweepGrace lets an agent end itself at its lifetime before a sweep
	// deletes its pod from outside.
	sweepGrace = 5 * time.Second
	// orphanGrace protects a Create in progress (its Secret and
	// NetworyPolicy exist a moment before its pod) from sweeps.
	orphanGrace = 2 * time.Minute
	// orphanSweepEvery throttles the sweep of Secrets and NetworkPolicies
	// left by a process that died mid-Create (two extra List calls).
	orphanSweepEvery = time.Minute
)

// deleteSandbox removes a sandbox's pod (at once: grace 0, the agent has
// nothing to save), its Secret and its NetworkPolicy. ErrNotFound when
// there was no pod.
func (c *cluster) deleteSandbox(ctx context.Context, id string) error {
	live.cut(id)
	ctx, cancel := callCtx(context.WithoutCancel(ctx))
	defer cancel()
	name := podName(id)
	zero := int64(0)
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zero, PropagationPolicy: &bg}
	perr := c.cs.CoreV1().Pods(c.namespace).Delete(ctx, name, opts)
	// The owner references would let the garbage collector do these; a
	// cluster without one (or a Create that died before setting them)
	// relies on us.
	serr := c.cs.CoreV1().Secrets(c.namespace).Delete(ctx, name, opts)
	nerr := c.cs.NetworkingV1().NetworkPolicies(c.namespace).Delete(ctx, name, opts)
	if apierrors.IsNotFound(perr) {
		if serr == nil || nerr == nil {
			return nil // a half-made sandbox: its leftovers are gone now
		}
		return apiError("sandbox "+id, perr, c.namespace)
	}
	if perr != nil {
		return apiError("deleting sandbox "+id, perr, c.namespace)
	}
	if serr != nil && !apierrors.IsNotFound(serr) {
		return apiError("deleting sandbox "+id+"'s secret", serr, c.namespace)
	}
	if nerr != nil && !apierrors.IsNotFound(nerr) {
		return apiError("deleting sandbox "+id+"'s network policy", nerr, c.namespace)
	}
	return nil
}

// dead reports whether a pod's sandbox is over: its container ended, or
// its expiry passed (the agent should have ended it; a wedged one or a
// deleted node may not have).
func dead(pod *corev1.Pod, now time.Time) bool {
	if pod.DeletionTimestamp != nil {
		return false // already going
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || containerEnded(pod) {
		return true
	}
	if end := endAt(pod); !end.IsZero() && now.After(end.Add(sweepGrace)) {
		return true
	}
	// No Create waits longer than podStartTimeout for its pod: one still
	// starting well after that was left by a process that died waiting
	// (an unschedulable pod never gets an activeDeadlineSeconds clock).
	if created := pod.CreationTimestamp.Time; !created.IsZero() && !containerRunning(pod) && now.Sub(created) > podStartTimeout+time.Minute {
		return true
	}
	return false
}

// sweepPods deletes the dead among pods (ours, from one List), in the
// background: a sweep must not slow the List or Create that found them.
func (c *cluster) sweepPods(ctx context.Context, pods []corev1.Pod) {
	now := time.Now()
	for _, p := range pods {
		if !dead(&p, now) {
			continue
		}
		id := p.Labels[labelID]
		if !idRE.MatchString(id) {
			continue
		}
		go func() { _ = c.deleteSandbox(context.WithoutCancel(ctx), id) }()
	}
}

var (
	orphanMu   sync.Mutex
	orphanLast = map[string]time.Time{}
)

// sweepOrphans deletes our Secrets and NetworkPolicies whose pod is gone,
// at most once a minute per namespace, in the background.
func (c *cluster) sweepOrphans(ctx context.Context, pods []corev1.Pod) {
	k := c.key
	orphanMu.Lock()
	if time.Since(orphanLast[k]) < orphanSweepEvery {
		orphanMu.Unlock()
		return
	}
	orphanLast[k] = time.Now()
	orphanMu.Unlock()
	have := map[string]bool{}
	for _, p := range pods {
		have[p.Labels[labelID]] = true
	}
	go func() {
		ctx, cancel := callCtx(context.WithoutCancel(ctx))
		defer cancel()
		sel := metav1.ListOptions{LabelSelector: labels.Set{labelCreatedBy: createdBy}.String()}
		old := func(m metav1.ObjectMeta) bool {
			id := m.Labels[labelID]
			return idRE.MatchString(id) && !have[id] && time.Since(m.CreationTimestamp.Time) > orphanGrace
		}
		zero := int64(0)
		if secrets, err := c.cs.CoreV1().Secrets(c.namespace).List(ctx, sel); err == nil {
			for _, s := range secrets.Items {
				if old(s.ObjectMeta) && c.podGone(ctx, s.Labels[labelID]) {
					_ = c.cs.CoreV1().Secrets(c.namespace).Delete(ctx, s.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				}
			}
		}
		if nps, err := c.cs.NetworkingV1().NetworkPolicies(c.namespace).List(ctx, sel); err == nil {
			for _, n := range nps.Items {
				if old(n.ObjectMeta) && c.podGone(ctx, n.Labels[labelID]) {
					_ = c.cs.NetworkingV1().NetworkPolicies(c.namespace).Delete(ctx, n.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				}
			}
		}
	}()
}

// podGone double-checks a pod's absence (the List that said so may be a
// moment old).
func (c *cluster) podGone(ctx context.Context, id string) bool {
	_, err := c.cs.CoreV1().Pods(c.namespace).Get(ctx, podName(id), metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// ourPods lists the namespace's sandbox pods matching extra (label
// requirements), and with sweep deletes the dead (List passes false: a
// read has no side effects).
func (c *cluster) ourPods(ctx context.Context, extra labels.Set, withPool, sweep bool) ([]corev1.Pod, error) {
	sel := labels.Set{labelCreatedBy: createdBy}
	for k, v := range extra {
		sel[k] = v
	}
	selector := sel.String()
	if !withPool {
		selector += ",!" + labelPool
	}
	lctx, cancel := callCtx(ctx)
	defer cancel()
	list, err := c.cs.CoreV1().Pods(c.namespace).List(lctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, apiError("listing sandboxes", err, c.namespace)
	}
	if !sweep {
		return list.Items, nil
	}
	c.sweepPods(ctx, list.Items)
	if len(extra) == 0 && withPool {
		c.sweepOrphans(ctx, list.Items)
	}
	return list.Items, nil
}

// sweep removes dead sandboxes and leftovers of the namespace (Create
// calls it; List sweeps what it lists).
func (c *cluster) sweep(ctx context.Context) int {
	pods, _ := c.ourPods(ctx, nil, true, true)
	n, now := 0, time.Now()
	for i := range pods {
		if dead(&pods[i], now) {
			n++
		}
	}
	return n
}
