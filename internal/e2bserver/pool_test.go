package e2bserver

import (
	"context"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// TestWarmPoolThroughServe: serve --warm-pool: a create that can use the
// pool gets a pooled sandbox with its own metadata and timeout, which runs
// code; the pool's waiting sandbox goes with the pools, the claimed one
// with the server.
func TestWarmPoolThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	s, base := testServer(t, Options{Config: sandboxes.Config{Memory: 512 << 20, CPU: 1, IdleTimeout: sandboxes.NoIdleTimeout,
		Options: local.Options{WarmPool: 1}}})
	// Before testServer's cleanup (LIFO), which checks nothing is left.
	t.Cleanup(func() { local.CloseWarmPools(context.Background()) })
	create := func() sandboxJSON {
		t.Helper()
		var sb sandboxJSON
		resp := call(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","timeout":120,"metadata":{"who":"pool-test"}}`, nil, &sb)
		if resp.StatusCode != 201 || sb.SandboxID == "" {
			t.Fatalf("create: %d %+v", resp.StatusCode, sb)
		}
		return sb
	}
	create() // a miss: it starts the pool
	for deadline := time.Now().Add(90 * time.Second); local.WarmPoolStats().Ready < 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never filled: %+v", local.WarmPoolStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	hits := local.WarmPoolStats().Hits
	sb := create()
	if h := local.WarmPoolStats().Hits; h != hits+1 {
		t.Fatalf("the second create was not served from the pool (hits %d → %d)", hits, h)
	}
	var got listedSandbox
	call(t, "GET", base+"/sandboxes/"+sb.SandboxID, testKey, "", nil, &got)
	if got.Metadata["who"] != "pool-test" || got.EndAt.After(time.Now().Add(121*time.Second)) || got.EndAt.Before(time.Now().Add(60*time.Second)) {
		t.Fatalf("the claimed sandbox: %+v; want its metadata and a 120 s timeout", got)
	}
	direct, err := sandboxes.Get(context.Background(), s.cfg, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Detach()
	if ex, err := direct.RunCode(context.Background(), "6 * 7"); err != nil || ex.Text() != "42" || ex.ExecutionCount != 1 {
		t.Fatalf("run in the claimed sandbox: %+v %v", ex, err)
	}
}
