package e2bserver

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// Lifecycle options serve can't honour are refused with the reason, never
// a sandbox that is killed at its timeout after all.
func TestAutoPauseRefused(t *testing.T) {
	_, base := testServer(t, Options{})
	for body, want := range map[string]string{
		`{"templateID":"base","autoPause":true}`:                                    "--isolation gvisor",
		`{"templateID":"base","autoResume":{"enabled":true}}`:                       "needs autoPause",
		`{"templateID":"base","autoPause":true,"autoPauseMemory":false}`:            "filesystem-only",
		`{"templateID":"base","autoPause":false,"autoResume":{"enabled":true}}`:     "needs autoPause",
		`{"templateID":"base","autoPause":true,"autoResume":{"enabled":false}}`:     "--isolation gvisor",
		`{"templateID":"base","autoPause":true,"autoPauseMemory":true,"timeout":5}`: "--isolation gvisor",
	} {
		wantError(t, "POST", base+"/sandboxes", testKey, body, 400, want)
	}
}

func needGVisorServe(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	_, err := exec.LookPath("runsc")
	testdep.Require(t, err == nil, "gVisor's runsc (apt-get install runsc; make deps)")
	testdep.Require(t, os.Geteuid() == 0, "root (isolation gvisor on the local variant runs runsc as root)")
	t.Setenv("CODE_SANDBOXES_STATE_DIR", t.TempDir())
}

// autoPause on serve --isolation gvisor: the timeout's end pauses the
// sandbox (details say paused, lifecycle onTimeout pause), traffic through
// the data plane resumes it with autoResume, connect resumes it, and the
// state survives both.
func TestAutoPauseGVisor(t *testing.T) {
	needGVisorServe(t)
	s, base := testServer(t, Options{Config: sandboxes.Config{Isolation: sandboxes.IsolationGVisor}})
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","autoPause":true,"allow_internet_access":true}`, 400, "internet")
	// A timeout long enough for the create and the first cell on a busy
	// host, then a short one: the timeout's clock starts at the create.
	a := createSB(t, base, testKey, `{"templateID":"base","timeout":60,"autoPause":true,"autoResume":{"enabled":true}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := runner(ctx, t, s, a.SandboxID)
	run("x = 40")
	u := base + "/sandboxes/" + a.SandboxID
	if resp := call(t, "POST", u+"/timeout", testKey, `{"timeout":2}`, nil, nil); resp.StatusCode != 204 {
		t.Fatalf("timeout: %d", resp.StatusCode)
	}
	details := func() sandboxDetail {
		t.Helper()
		var d sandboxDetail
		if resp := call(t, "GET", u, testKey, "", nil, &d); resp.StatusCode != 200 {
			t.Fatalf("details: %d (killed at its timeout instead of paused?)", resp.StatusCode)
		}
		return d
	}
	waitState := func(want string) {
		t.Helper()
		for ctx.Err() == nil {
			if details().State == want {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("the sandbox never became %s", want)
	}
	if d := details(); d.Lifecycle.OnTimeout != "pause" || !d.Lifecycle.AutoResume {
		t.Errorf("lifecycle %+v, want onTimeout pause, autoResume true", d.Lifecycle)
	}
	waitState("paused")
	wantError(t, "POST", u+"/pause", testKey, `{"memory":false}`, 400, "filesystem-only")
	// Traffic to one of its ports resumes it (autoResume).
	h := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49999", "E2B-Traffic-Access-Token": *a.TrafficAccessToken}
	if st := call(t, "GET", base+"/contexts", "", "", h, nil).StatusCode; st != 200 {
		t.Fatalf("GET /contexts of the auto-paused sandbox: %d, want 200 (resumed by the request)", st)
	}
	if d := details(); d.State != "running" {
		t.Fatalf("after traffic: state %q, want running", d.State)
	}
	if got := run("x + 2"); got != "42" {
		t.Fatalf("x + 2 after the auto-resume = %q", got)
	}
	// Again with a short timeout set later, and connect to wake it.
	if resp := call(t, "POST", u+"/timeout", testKey, `{"timeout":1}`, nil, nil); resp.StatusCode != 204 {
		t.Fatalf("timeout: %d", resp.StatusCode)
	}
	waitState("paused")
	var conn sandboxJSON
	if resp := call(t, "POST", base+"/sandboxes/"+a.SandboxID+"/connect", testKey, `{"timeout":60}`, nil, &conn); resp.StatusCode != 201 {
		t.Fatalf("connect to the auto-paused sandbox: %d, want 201", resp.StatusCode)
	}
	if got := run("x + 1"); got != "41" {
		t.Fatalf("x + 1 after connect = %q", got)
	}
	if resp := call(t, "DELETE", u, testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("kill: %d", resp.StatusCode)
	}
}

// TestAutoPausedRefusesTraffic: once details say an autoPause sandbox
// (without autoResume) is paused, its ports answer 502 as a gone sandbox's
// do (the SDK's isRunning is then false), also while the checkpoint still
// runs and its agent would still answer; connect resumes it.
func TestAutoPausedRefusesTraffic(t *testing.T) {
	needGVisorServe(t)
	s, base := testServer(t, Options{Config: sandboxes.Config{Isolation: sandboxes.IsolationGVisor}})
	a := createSB(t, base, testKey, `{"templateID":"base","timeout":60,"autoPause":true}`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := runner(ctx, t, s, a.SandboxID)
	run("x = 40")
	u := base + "/sandboxes/" + a.SandboxID
	// Short only now: its clock starts at the create, which with the first
	// cell can take seconds on a busy host.
	if resp := call(t, "POST", u+"/timeout", testKey, `{"timeout":1}`, nil, nil); resp.StatusCode != 204 {
		t.Fatalf("timeout: %d", resp.StatusCode)
	}
	h := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": a.EnvdAccessToken}
	for ctx.Err() == nil {
		var d sandboxDetail
		if resp := call(t, "GET", u, testKey, "", nil, &d); resp.StatusCode != 200 {
			t.Fatalf("details: %d (killed at its timeout instead of paused?)", resp.StatusCode)
		}
		if d.State == "paused" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := call(t, "GET", base+"/health", "", "", h, nil).StatusCode; st != http.StatusBadGateway {
		t.Fatalf("GET /health of a sandbox whose details say paused: %d, want 502 (the SDK's isRunning must be false)", st)
	}
	var conn sandboxJSON
	if resp := call(t, "POST", u+"/connect", testKey, `{"timeout":60}`, nil, &conn); resp.StatusCode != 201 {
		t.Fatalf("connect: %d, want 201", resp.StatusCode)
	}
	if st := call(t, "GET", base+"/health", "", "", h, nil).StatusCode; st/100 != 2 {
		t.Fatalf("GET /health after connect: %d, want 2xx", st)
	}
	if got := run("x + 2"); got != "42" {
		t.Fatalf("x + 2 after connect = %q", got)
	}
}
