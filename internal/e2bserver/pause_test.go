package e2bserver

import (
	"context"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// runner returns a function that runs code in sandbox id through the Go
// API (as the server's own config reaches it) and returns its text; any
// error fails the test.
func runner(ctx context.Context, t *testing.T, s *Server, id string) func(code string) string {
	return runnerOf(ctx, t, s, id, (*sandboxes.Execution).Text)
}

// runnerOf is runner, returning what out takes from the execution.
func runnerOf(ctx context.Context, t *testing.T, s *Server, id string, out func(*sandboxes.Execution) string) func(code string) string {
	return func(code string) string {
		t.Helper()
		sb, err := sandboxes.Get(ctx, s.cfg, id)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Detach()
		ex, err := sb.RunCode(ctx, code)
		if err != nil || ex.Error != nil {
			t.Fatalf("%s: %v %v", code, err, ex.Error)
		}
		return out(ex)
	}
}

// E2B's pause, resume and connect-resumes, with their statuses, on serve
// --isolation gvisor; the state survives.
func TestPauseResumeGVisor(t *testing.T) {
	needGVisorServe(t)
	s, base := testServer(t, Options{Config: sandboxes.Config{Isolation: sandboxes.IsolationGVisor}})
	a := createSB(t, base, testKey, `{"templateID":"base","timeout":90}`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := runner(ctx, t, s, a.SandboxID)
	run("x = 40")
	u := base + "/sandboxes/" + a.SandboxID
	if resp := call(t, "POST", u+"/pause", testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("pause: %d, want 204", resp.StatusCode)
	}
	wantError(t, "POST", u+"/pause", testKey, "", 409, "already paused")
	// Calls on a running sandbox are refused (and the sandbox kept).
	wantError(t, "POST", u+"/timeout", testKey, `{"timeout":60}`, 409, "paused")
	// The paused state in list filters.
	for q, want := range map[string]int{"state=paused": 1, "state=running": 0, "state=running,paused": 1, "": 1} {
		var l []listedSandbox
		call(t, "GET", base+"/v2/sandboxes?"+q, testKey, "", nil, &l)
		if len(l) != want || (want == 1 && (l[0].SandboxID != a.SandboxID || l[0].State != "paused")) {
			t.Errorf("list %q while paused: %+v, want %d paused", q, l, want)
		}
	}
	var res sandboxJSON
	if resp := call(t, "POST", u+"/resume", testKey, `{}`, nil, &res); resp.StatusCode != 201 || res.SandboxID != a.SandboxID || res.EnvdAccessToken != a.EnvdAccessToken {
		t.Fatalf("resume: %d %+v", resp.StatusCode, res)
	}
	wantError(t, "POST", u+"/resume", testKey, `{}`, 409, "already running")
	if got := run("x + 2"); got != "42" {
		t.Fatalf("x + 2 after resume = %q", got)
	}
	if resp := call(t, "POST", u+"/pause", testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("pause again: %d", resp.StatusCode)
	}
	var conn sandboxJSON
	if resp := call(t, "POST", base+"/v2/sandboxes/"+a.SandboxID+"/connect", testKey, `{"timeout":60}`, nil, &conn); resp.StatusCode != 201 || conn.EnvdAccessToken != a.EnvdAccessToken {
		t.Fatalf("connect to a paused sandbox: %d %+v, want 201 (resumed)", resp.StatusCode, conn)
	}
	if resp := call(t, "POST", base+"/v2/sandboxes/"+a.SandboxID+"/connect", testKey, `{"timeout":60}`, nil, &conn); resp.StatusCode != 200 {
		t.Fatalf("connect to a running sandbox: %d, want 200", resp.StatusCode)
	}
	if got := run("x + 1"); got != "41" {
		t.Fatalf("x + 1 after connect = %q", got)
	}
	if resp := call(t, "DELETE", u, testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("kill: %d", resp.StatusCode)
	}
	// A paused sandbox has its details (state paused) and can be killed, as
	// on E2B (upstream api/list kills the paused sandboxes it lists; this
	// answered 409 before).
	b := createSB(t, base, testKey, `{"templateID":"base","timeout":90}`)
	ub := base + "/sandboxes/" + b.SandboxID
	if resp := call(t, "POST", ub+"/pause", testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("pause b: %d", resp.StatusCode)
	}
	var d sandboxDetail
	if resp := call(t, "GET", ub, testKey, "", nil, &d); resp.StatusCode != 200 || d.State != "paused" {
		t.Errorf("details of a paused sandbox: %d state %q, want 200 paused", resp.StatusCode, d.State)
	}
	if resp := call(t, "DELETE", ub, testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("kill a paused sandbox: %d, want 204", resp.StatusCode)
	}
	var l []listedSandbox
	call(t, "GET", base+"/v2/sandboxes?state=running,paused", testKey, "", nil, &l)
	if len(l) != 0 {
		t.Errorf("after killing both: %+v", l)
	}
}
