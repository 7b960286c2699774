package e2bserver

import (
	"context"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// Issue #41 items 5 and 8c: envd's /health needs no token, so it must not
// resume a paused autoResume sandbox (a resume is charged to its team); and
// a running autoResume sandbox's requests don't read its record from disk
// each time.
func TestHealthDoesNotWake(t *testing.T) {
	needGVisorServe(t)
	s, base := testServer(t, Options{Config: sandboxes.Config{Isolation: sandboxes.IsolationGVisor}})
	a := createSB(t, base, testKey, `{"templateID":"base","timeout":120,"autoPause":true,"autoResume":{"enabled":true}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := s.lookup(a.SandboxID, "")
	viaHeader := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983"}
	viaHost := map[string]string{"Host": "49983-" + a.SandboxID + ".localhost"}
	authed := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": a.EnvdAccessToken}

	// 8c: running, its requests read no state after the first.
	if st, _ := getText(t, base+"/health", viaHeader); st/100 != 2 {
		t.Fatalf("GET /health of the running sandbox: %d", st)
	}
	reads := s.stateReads.Load()
	for range 20 {
		if st, _ := getText(t, base+"/health", viaHost); st/100 != 2 {
			t.Fatalf("GET /health of the running sandbox: %d", st)
		}
		if st, _ := getText(t, base+"/envs", authed); st != 200 {
			t.Fatalf("GET /envs of the running sandbox: %d", st)
		}
	}
	if d := s.stateReads.Load() - reads; d != 0 {
		t.Errorf("40 requests to a running autoResume sandbox read its state %d times, want 0", d)
	}

	// 5: paused, /health answers paused and resumes nothing, by either route.
	u := base + "/sandboxes/" + a.SandboxID
	if resp := call(t, "POST", u+"/pause", testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("pause: %d", resp.StatusCode)
	}
	resumes := s.resumeCount(e)
	for _, hdr := range []map[string]string{viaHeader, viaHost} {
		for _, m := range []string{"GET", "HEAD"} {
			resp := call(t, m, base+"/health", "", "", hdr, nil)
			if resp.StatusCode != 502 {
				t.Errorf("%s /health of the paused sandbox (%v): %d, want 502 (paused: the SDK's isRunning false)", m, hdr, resp.StatusCode)
			}
		}
	}
	var d sandboxDetail
	if resp := call(t, "GET", u, testKey, "", nil, &d); resp.StatusCode != 200 || d.State != "paused" {
		t.Errorf("after /health: %d, state %q, want paused", resp.StatusCode, d.State)
	}
	if got := s.resumeCount(e); got != resumes {
		t.Errorf("/health resumed the sandbox (%d resumes, were %d)", got, resumes)
	}
	// Any other request still resumes it (autoResume), and then reads its
	// state again only once.
	if st, _ := getText(t, base+"/envs", authed); st != 200 {
		t.Fatalf("GET /envs of the paused autoResume sandbox: %d, want 200 (resumed by it)", st)
	}
	if resp := call(t, "GET", u, testKey, "", nil, &d); resp.StatusCode != 200 || d.State != "running" {
		t.Errorf("after a request: state %q, want running", d.State)
	}
	reads = s.stateReads.Load()
	for range 10 {
		if st, _ := getText(t, base+"/health", viaHost); st/100 != 2 {
			t.Fatalf("GET /health after the resume: %d", st)
		}
	}
	if d := s.stateReads.Load() - reads; d > 1 {
		t.Errorf("10 requests after the resume read the state %d times, want at most 1", d)
	}
	// What serve knows ends with a shorter timeout: the timeout's pause is
	// seen, and the next request resumes it.
	if resp := call(t, "POST", u+"/timeout", testKey, `{"timeout":1}`, nil, nil); resp.StatusCode != 204 {
		t.Fatalf("timeout: %d", resp.StatusCode)
	}
	for ctx.Err() == nil {
		if call(t, "GET", u, testKey, "", nil, &d); d.State == "paused" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, _ := getText(t, base+"/health", viaHost); st != 502 {
		t.Errorf("GET /health after the timeout's pause: %d, want 502 (paused)", st)
	}
	if st, _ := getText(t, base+"/envs", authed); st != 200 {
		t.Errorf("GET /envs after the timeout's pause: %d, want 200 (resumed by it)", st)
	}
}
