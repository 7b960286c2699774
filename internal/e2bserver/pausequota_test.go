package e2bserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// TestPausedQuotaAccounting: the bookkeeping alone (entries planted, no
// sandbox): a paused sandbox leaves its team's quota, and every paused
// sandbox or autoPause one holds one of the team's paused slots.
func TestPausedQuotaAccounting(t *testing.T) {
	s, _ := testServer(t, Options{Keys: []Key{{Key: keyA, Team: "team-a", Quota: &Quota{Sandboxes: 1, TotalMemory: 1 << 30, Memory: 1 << 30}}}, MaxPaused: 2})
	plant := func(id string, e *entry) {
		e.id, e.team, e.inst, e.memory = id, "team-a", unanswering{}, 1<<30
		s.mu.Lock()
		s.sandboxes[id] = e
		s.mu.Unlock()
		t.Cleanup(func() { // before the server's own cleanup kills what it holds
			s.mu.Lock()
			delete(s.sandboxes, id)
			s.mu.Unlock()
		})
	}
	reserve := func(autoPause bool) error {
		t.Helper()
		_, release, err := s.reserve("team-a", autoPause)
		if err == nil {
			release()
		}
		return err
	}
	plant("paused1", &entry{paused: true})
	if err := reserve(false); err != nil {
		t.Fatalf("a create beside a paused sandbox (quota 1 sandbox, 1 GiB): %v", err)
	}
	plant("running1", &entry{autoPause: true})
	if err := reserve(false); !errors.Is(err, errQuota) || !strings.Contains(err.Error(), "may run 1") {
		t.Fatalf("a create beside a running sandbox: %v, want the quota's refusal", err)
	}
	// paused1 and running1 (autoPause) hold both paused slots.
	s.mu.Lock()
	running1 := s.sandboxes["running1"]
	running1.paused = true
	s.mu.Unlock()
	if err := reserve(true); !errors.Is(err, errQuota) || !strings.Contains(err.Error(), "--max-paused") {
		t.Fatalf("an autoPause create with both paused slots held: %v, want the --max-paused refusal", err)
	}
	if err := reserve(false); err != nil {
		t.Fatalf("a plain create with only paused sandboxes: %v", err)
	}
	// A resume counts the sandbox as running again first: with a create in
	// flight taking the one running slot, it is refused and stays paused.
	_, release, err := s.reserve("team-a", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.resumeCounted(context.Background(), running1); !errors.Is(err, errQuota) || !strings.Contains(err.Error(), "stays paused") {
		t.Fatalf("resume with the team at its quota: %v, want a refusal", err)
	}
	release()
	isPaused := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return running1.paused
	}
	if !isPaused() {
		t.Error("a refused resume took the sandbox out of the paused ones")
	}
	// A look at the sandbox from before a resume says nothing about it.
	s.mu.Lock()
	running1.paused, running1.resumes = false, 3
	s.mu.Unlock()
	s.notePaused("running1", 2)
	if isPaused() {
		t.Error("a stale look marked a resumed sandbox paused")
	}
	s.notePaused("running1", 3)
	if !isPaused() {
		t.Error("a current look that saw it paused was not recorded")
	}
}

// TestPausedOutsideQuotaGVisor: as on E2B, a paused sandbox doesn't count
// against its team's quota, a resume needs room in it (429 otherwise, the
// sandbox stays paused), and --max-paused bounds what a team keeps paused,
// counting autoPause sandboxes from their create.
func TestPausedOutsideQuotaGVisor(t *testing.T) {
	needGVisorServe(t)
	s, base := testServer(t, Options{Config: sandboxes.Config{Isolation: sandboxes.IsolationGVisor},
		Quota: Quota{Sandboxes: 1}, MaxPaused: 1})
	a := createSB(t, base, testKey, `{"templateID":"base","timeout":120}`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := runner(ctx, t, s, a.SandboxID)
	run("x = 40")
	ua := base + "/sandboxes/" + a.SandboxID
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base"}`, 429, "may run 1")
	if resp := call(t, "POST", ua+"/pause", testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("pause: %d", resp.StatusCode)
	}
	// Paused, A is out of the quota: B fits (429 before).
	b := createSB(t, base, testKey, `{"templateID":"base","timeout":120}`)
	ub := base + "/sandboxes/" + b.SandboxID
	// A can't come back while B takes the team's one running slot.
	wantError(t, "POST", ua+"/connect", testKey, `{"timeout":60}`, 429, "stays paused")
	wantError(t, "POST", ua+"/resume", testKey, `{}`, 429, "may run 1")
	var d sandboxDetail
	if call(t, "GET", ua, testKey, "", nil, &d); d.State != "paused" {
		t.Fatalf("after a refused resume: %q, want paused", d.State)
	}
	// A holds the team's one paused slot.
	wantError(t, "POST", ub+"/pause", testKey, "", 429, "--max-paused")
	if resp := call(t, "DELETE", ub, testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("kill B: %d", resp.StatusCode)
	}
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","autoPause":true}`, 429, "--max-paused")
	var res sandboxJSON
	if resp := call(t, "POST", ua+"/connect", testKey, `{"timeout":60}`, nil, &res); resp.StatusCode != 201 {
		t.Fatalf("connect once B is gone: %d", resp.StatusCode)
	}
	if got := run("x + 2"); got != "42" {
		t.Fatalf("x + 2 after resume = %q", got)
	}
	// Running again, A is back in the quota and its paused slot is free.
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base"}`, 429, "may run 1")
	if resp := call(t, "DELETE", ua, testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("kill A: %d", resp.StatusCode)
	}
	// An autoPause sandbox paused by its timeout (without serve) leaves the
	// quota too, once serve sees it paused.
	c := createSB(t, base, testKey, `{"templateID":"base","timeout":3,"autoPause":true}`)
	uc := base + "/sandboxes/" + c.SandboxID
	defer call(t, "DELETE", uc, testKey, "", nil, nil)
	for d.State = ""; d.State != "paused"; time.Sleep(200 * time.Millisecond) {
		if ctx.Err() != nil {
			t.Fatalf("the autoPause sandbox did not pause at its timeout: %q", d.State)
		}
		d = sandboxDetail{}
		call(t, "GET", uc, testKey, "", nil, &d)
	}
	e := createSB(t, base, testKey, `{"templateID":"base","timeout":120}`)
	defer call(t, "DELETE", base+"/sandboxes/"+e.SandboxID, testKey, "", nil, nil)
}
