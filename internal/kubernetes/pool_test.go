package kubernetes

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
)

// TestRenewDoesNotUndoAClaim: a claim that lands while the pool renews its
// pods must keep the sandbox's own lifetime. The renew used to work on a
// snapshot: it reset a just-claimed sandbox's lifetime to the pool's five
// minutes (or killed it on a failed renew). The API server is client-go's
// fake (the cluster suites run the real one); the agent is a stub that
// records the lifetimes it is given.
func TestRenewDoesNotUndoAClaim(t *testing.T) {
	const id = "aaaaaaaaaaaaaaaa"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName(id), Namespace: "ns",
		Labels: map[string]string{labelPool: "true", labelPoolKey: "k"}, Annotations: map[string]string{"pool": "k"}},
		Spec: corev1.PodSpec{ActiveDeadlineSeconds: new(int64(poolDeadline.Seconds()))}}
	cl := &cluster{cs: fake.NewSimpleClientset(pod), namespace: "ns"}

	var mu sync.Mutex
	var lifetimes []float64
	renewing := make(chan struct{})
	release := make(chan struct{})
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Timeout float64 `json:"timeout"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Timeout == poolLifetime.Seconds() {
			close(renewing)
			<-release // the renew is slow: the claim comes meanwhile
		}
		mu.Lock()
		lifetimes = append(lifetimes, req.Timeout)
		mu.Unlock()
		_, _ = w.Write([]byte("{}"))
	}))
	defer agent.Close()
	inst := &instance{c: cl, id: id, tun: &tunnel{}, started: time.Now(), cl: client.New(client.Options{EnvdURL: agent.URL})}
	pl := &pool{p: &plan{c: cl}, hash: "k", wake: make(chan struct{}, 1), ready: []*instance{inst}}

	done := make(chan struct{})
	go func() { pl.renewAll(); close(done) }()
	<-renewing
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := pl.take(ctx, meta{id: id, lifetime: time.Hour})
	close(release)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		// The pod being renewed was not handed out: take it now.
		if got, err = pl.take(ctx, meta{id: id, lifetime: time.Hour}); err != nil || got == nil {
			t.Fatalf("after the renew the pod must be claimable: %v %v", got, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if last := lifetimes[len(lifetimes)-1]; last != time.Hour.Seconds() {
		t.Fatalf("lifetimes given to the agent %v: the claimed sandbox ends with %gs, not its own 3600s", lifetimes, last)
	}
}
