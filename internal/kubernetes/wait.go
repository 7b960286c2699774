package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Bounds on a pod's start. Image pulls from a registry can take minutes;
// everything else is seconds.
const (
	podStartTimeout = 5 * time.Minute
	// unschedulableGrace lets the scheduler retry (a node finishing
	// start-up, a pod on its way out) before we report its verdict. A
	// cluster autoscaler adding a node takes longer: a warm pool hides
	// that, this variant doesn't wait for it.
	unschedulableGrace = 10 * time.Second
	// agentTimeout bounds the agent answering once its container runs.
	agentTimeout = 60 * time.Second
	// statusCatchUp bounds how long an answering agent waits for its
	// pod's status to say it runs.
	statusCatchUp = 2 * time.Second
)

// capacityRE matches the scheduler's reasons for a node being full (as
// opposed to not matching the pod: selectors, taints, runtime class).
var capacityRE = regexp.MustCompile(`\b(Insufficient [a-z./-]+|Too many pods)\b`)

// loadHint tells how to get a sandbox's image into the cluster; env is the
// environment it was made from ("" for kubernetes.Options.Image).
func loadHint(env string) string {
	if env == "" {
		return "load it into the cluster (`kind load image-archive`, `ctr -n k8s.io images import` on each node) or push it to a registry the cluster pulls from; `code-sandboxes environments export` writes an environment as such an image"
	}
	return fmt.Sprintf("export the environment with `code-sandboxes environments export %s -o %s.tar` and load that into the cluster: `kind load image-archive %s.tar`, "+
		"`ctr -n k8s.io images import %s.tar` on each node, or push it to a registry the cluster pulls from and set kubernetes.Options.Image", env, env, env, env)
}

// podFailure explains a pod that can't become a sandbox, or returns nil
// while it may still start. since is when the wait began.
func podFailure(pod *corev1.Pod, since time.Time) error {
	image := ""
	if len(pod.Spec.Containers) > 0 {
		image = pod.Spec.Containers[0].Image
	}
	if pod.DeletionTimestamp != nil {
		return fmt.Errorf("%w: the sandbox's pod %s was deleted while it started (by someone else, or a node drain)", sberr.ErrUnavailable, pod.Name)
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return terminated(pod)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		if t := cs.State.Terminated; t != nil {
			return terminated(pod)
		}
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		msg := clip(w.Message, 600)
		switch w.Reason {
		case "ErrImageNeverPull":
			return fmt.Errorf("%w: the image %s is not on the node %s and ImagePullPolicy is Never; %s",
				sberr.ErrInvalidConfig, image, pod.Spec.NodeName, loadHint(pod.Annotations[annEnv]))
		case "ErrImagePull", "ImagePullBackOff":
			return fmt.Errorf("%w: the image %s is not on the node %s and could not be pulled (%s: %s); %s",
				sberr.ErrInvalidConfig, image, pod.Spec.NodeName, w.Reason, msg, loadHint(pod.Annotations[annEnv]))
		case "InvalidImageName":
			return fmt.Errorf("%w: the image name %q is invalid: %s", sberr.ErrInvalidConfig, image, msg)
		case "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff":
			return fmt.Errorf("%w: the node could not start the sandbox's container (%s): %s", sberr.ErrUnavailable, w.Reason, msg)
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			if time.Since(since) < unschedulableGrace {
				return nil
			}
			if capacityRE.MatchString(c.Message) {
				// A node that would take the pod but is full: room may
				// come (sandboxes end, a node is added), so the caller
				// may retry (serve: 503 with Retry-After).
				return fmt.Errorf("%w: no node has room for the sandbox's pod now: the scheduler says %q; retry later, free sandboxes, or lower Memory/CPU",
					sberr.ErrNoRoom, clip(c.Message, 600))
			}
			return fmt.Errorf("%w: no node can run the sandbox's pod: the scheduler says %q; lower Memory/CPU, or fix kubernetes.Options.NodeSelector, Tolerations or RuntimeClassName",
				sberr.ErrInvalidConfig, clip(c.Message, 600))
		}
	}
	return nil
}

// terminated explains a pod whose container has ended.
func terminated(pod *corev1.Pod) error {
	if pod.Status.Reason == "Evicted" {
		return fmt.Errorf("%w: the sandbox's pod was evicted from its node: %s", sberr.ErrUnavailable, clip(pod.Status.Message, 600))
	}
	if pod.Status.Reason == "DeadlineExceeded" {
		return fmt.Errorf("%w: the sandbox's pod reached its activeDeadlineSeconds (its lifetime) and was stopped", sberr.ErrUnavailable)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		t := cs.State.Terminated
		if cs.Name != containerName || t == nil {
			continue
		}
		limit := ""
		if q, ok := pod.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; ok {
			limit = " of " + q.String()
		}
		switch {
		case t.Reason == "OOMKilled":
			return fmt.Errorf("%w: the sandbox was killed for running out of memory (its limit%s, OOMKilled); give it more Memory", sberr.ErrUnavailable, limit)
		case t.ExitCode == 0:
			return fmt.Errorf("%w: the sandbox's agent exited (its lifetime ended, or it was shut down)", sberr.ErrUnavailable)
		case strings.Contains(t.Message, homeseed.TooBig):
			// The environment's home outgrows the pod's: the caller's
			// configuration, not the cluster, is at fault.
			return fmt.Errorf("%w: %s", sberr.ErrInvalidConfig, clip(strings.TrimSpace(t.Message), 1200))
		}
		hint := ""
		if strings.Contains(t.Message, "unknown flag") || strings.Contains(t.Message, "unknown command") || strings.Contains(t.Message, "Usage:") {
			hint = "; the image's agent (" + pod.Spec.Containers[0].Command[0] + ") looks older than this program: export the image again with `code-sandboxes environments export` and load it"
		}
		return fmt.Errorf("%w: the sandbox's agent exited with status %d (%s): %s%s", sberr.ErrUnavailable, t.ExitCode, t.Reason, clip(t.Message, 1200), hint)
	}
	msg := pod.Status.Message
	if msg == "" {
		msg = "no reason given"
	}
	return fmt.Errorf("%w: the sandbox's pod ended (%s %s): %s", sberr.ErrUnavailable, pod.Status.Phase, pod.Status.Reason, clip(msg, 600))
}

// fatalProbe wraps a probe answer that retrying can't change (a refused
// token, an agent that is some other sandbox's).
type fatalProbe struct{ err error }

func (f fatalProbe) Error() string { return f.err.Error() }
func (f fatalProbe) Unwrap() error { return f.err }

// waitReady waits until probe succeeds — the agent answers through
// port-forward — and watches the pod meanwhile, explaining every state that
// means it never will. The probe starts as soon as the pod has a node,
// without waiting for the kubelet to report the container running (its
// status lags the container by up to a second); it backs off to once a
// second while an image is pulled, and is retried at once when the pod is
// reported running. Once the agent answers, the wait ends as soon as the
// status agrees (at most statusCatchUp later), so that what others read
// from the pod matches. Events come from a watch; polling stands in when
// the watch can't be had or ends.
func (c *cluster) waitReady(ctx context.Context, name string, probe func(context.Context) error) (*corev1.Pod, error) {
	since := time.Now()
	ctx, cancel := context.WithTimeout(ctx, podStartTimeout)
	defer cancel()
	var (
		last         *corev1.Pod
		runningSince time.Time
		probing      bool
		lastProbe    atomic.Pointer[error]
		probeDone    = make(chan error, 1)
		probeNow     = make(chan struct{}, 1)
		agentOK      time.Time
	)
	// ready: the agent answered, and the pod's status says so too (so
	// that Info, List and Get from elsewhere see it running) or has had
	// statusCatchUp to.
	ready := func() bool {
		return !agentOK.IsZero() && (!runningSince.IsZero() || time.Since(agentOK) > statusCatchUp)
	}
	startProbe := func() {
		if probing {
			return
		}
		probing = true
		go func() {
			delay := 25 * time.Millisecond
			for {
				err := probe(ctx)
				var fatal fatalProbe
				if err == nil || errors.As(err, &fatal) {
					probeDone <- err
					return
				}
				lastProbe.Store(&err)
				select {
				case <-ctx.Done():
					return
				case <-probeNow:
				case <-time.After(delay):
				}
				if delay < time.Second {
					delay *= 2
				}
			}
		}()
	}
	// check records p and returns why the wait failed, if it did.
	check := func(p *corev1.Pod) error {
		last = p
		if err := podFailure(p, since); err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			startProbe()
		}
		if runningSince.IsZero() && p.Status.Phase == corev1.PodRunning && containerRunning(p) {
			runningSince = time.Now()
			select {
			case probeNow <- struct{}{}:
			default:
			}
		}
		if !runningSince.IsZero() && time.Since(runningSince) > agentTimeout {
			why := "no answer"
			if e := lastProbe.Load(); e != nil {
				why = (*e).Error()
			}
			return fmt.Errorf("%w: the sandbox's container runs, but its agent did not answer through port-forward within %s: %s", sberr.ErrTimeout, agentTimeout, why)
		}
		return nil
	}
	deleted := fmt.Errorf("%w: the sandbox's pod %s was deleted while it started (by someone else, or a node drain)", sberr.ErrUnavailable, name)
	// Failures that take time to be one (Unschedulable, a silent agent)
	// are re-checked even when no event comes.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		gctx, gcancel := callCtx(ctx)
		pod, err := c.cs.CoreV1().Pods(c.namespace).Get(gctx, name, metav1.GetOptions{})
		gcancel()
		switch {
		case err == nil:
			if err := check(pod); err != nil {
				return pod, err
			}
		case ctx.Err() != nil:
		case apierrors.IsNotFound(err):
			return nil, deleted
		default:
			return nil, apiError("reading the sandbox's pod", err, c.namespace)
		}
		var events <-chan watch.Event
		var w watch.Interface
		if err == nil {
			timeout := int64(60)
			w, err = c.cs.CoreV1().Pods(c.namespace).Watch(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: pod.ResourceVersion, TimeoutSeconds: &timeout})
			if err == nil {
				events = w.ResultChan()
			}
		}
		// Without a watch, poll; a watch that ends is re-made at most
		// four times a second.
		watched := time.Now()
		poll := time.After(250 * time.Millisecond)
		pause := func() { time.Sleep(max(0, 250*time.Millisecond-time.Since(watched))) }
		pod, err, done := func() (*corev1.Pod, error, bool) {
			if w != nil {
				defer w.Stop()
			}
			for {
				select {
				case err := <-probeDone:
					if err != nil {
						return last, err, true
					}
					agentOK = time.Now()
					if ready() {
						return last, nil, true
					}
				case ev, ok := <-events:
					if !ok {
						pause()
						return nil, nil, false
					}
					p, isPod := ev.Object.(*corev1.Pod)
					switch {
					case ev.Type == watch.Deleted:
						return last, deleted, true
					case ev.Type == watch.Error || !isPod:
						pause()
						return nil, nil, false
					}
					if err := check(p); err != nil {
						return p, err, true
					}
					if ready() {
						return p, nil, true
					}
				case <-poll:
					if events == nil {
						return nil, nil, false
					}
				case <-tick.C:
					if last != nil {
						if err := check(last); err != nil {
							return last, err, true
						}
					}
					if ready() {
						return last, nil, true
					}
				case <-ctx.Done():
					if errors.Is(ctx.Err(), context.DeadlineExceeded) && last != nil {
						return last, fmt.Errorf("%w: the sandbox's pod did not start within %s (%s)%s", sberr.ErrTimeout, podStartTimeout, describe(last), c.warnings(context.WithoutCancel(ctx), last)), true
					}
					return last, ctx.Err(), true
				}
			}
		}()
		if done {
			return pod, err
		}
	}
}

// describe is a one-line summary of a starting pod.
func describe(pod *corev1.Pod) string {
	parts := []string{"phase " + string(pod.Status.Phase)}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, "container "+w.Reason+": "+clip(w.Message, 300))
		}
	}
	for _, cd := range pod.Status.Conditions {
		if cd.Status != corev1.ConditionTrue && cd.Message != "" {
			parts = append(parts, string(cd.Type)+": "+clip(cd.Message, 300))
		}
	}
	return strings.Join(parts, "; ")
}

// warnings returns the pod's last warning events (FailedMount,
// FailedCreatePodSandBox …), which say what the status doesn't.
func (c *cluster) warnings(ctx context.Context, pod *corev1.Pod) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", pod.Name), fields.OneTermEqualSelector("involvedObject.kind", "Pod"))
	evs, err := c.cs.CoreV1().Events(c.namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.String(), Limit: 100})
	if err != nil || len(evs.Items) == 0 {
		return ""
	}
	items := evs.Items
	sort.Slice(items, func(i, j int) bool { return items[i].LastTimestamp.Before(&items[j].LastTimestamp) })
	var out []string
	for i := len(items) - 1; i >= 0 && len(out) < 3; i-- {
		if e := items[i]; e.Type == corev1.EventTypeWarning {
			out = append(out, e.Reason+": "+clip(e.Message, 300))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; events: " + strings.Join(out, "; ")
}

// clip bounds text that came from the cluster (or from the pod: a
// container's termination message is whatever its process printed).
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
