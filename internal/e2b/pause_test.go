package e2b_test

// Pause, resume, snapshots and forks against E2B's wire format
// (spec/openapi.yml of e2b-dev/E2B: /sandboxes/{id}/pause, /connect,
// /snapshots; the npm SDK's SandboxApi.pause, connectSandbox,
// createSnapshot), with hostile and buggy answers.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// E2B's SnapshotInfo (201 of POST /sandboxes/{id}/snapshots): the ID is
// namespaced and tagged, the name given is one of its names.
const fixtureSnapshotInfo = `{"snapshotID":"team-slug/fixture-snap:default","names":["team-slug/fixture-snap:default"]}`

const fixtureID = "i1a2b3c4d5e6f7g8h9j0k"

// pausingFake answers pause and connect as E2B does, keeping the state.
type pausingFake struct {
	*fake
	mu     sync.Mutex
	paused bool
	endAt  time.Time
}

func newPausingFake(t *testing.T) *pausingFake {
	p := &pausingFake{fake: newFake(t), endAt: time.Now().Add(10 * time.Minute)}
	p.override = func(w http.ResponseWriter, r *http.Request, body string) bool {
		if r.Header.Get("E2b-Sandbox-Id") != "" || r.Header.Get("X-API-Key") != testKey {
			return false
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		js := func(status int, body string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
		base := "/sandboxes/" + fixtureID
		switch {
		case r.Method == "GET" && r.URL.Path == base:
			d := map[string]any{}
			_ = json.Unmarshal([]byte(fixtureDetail), &d)
			d["endAt"] = p.endAt.UTC().Format(time.RFC3339)
			if p.paused {
				d["state"] = "paused"
			}
			b, _ := json.Marshal(d)
			js(http.StatusOK, string(b))
		case r.Method == "POST" && r.URL.Path == base+"/pause":
			if p.paused {
				js(http.StatusConflict, `{"code":409,"message":"Sandbox `+fixtureID+` is already paused"}`)
				return true
			}
			p.paused = true
			w.WriteHeader(http.StatusNoContent)
		case r.Method == "POST" && r.URL.Path == base+"/connect":
			status := http.StatusOK
			if p.paused {
				status = http.StatusCreated
			}
			p.paused = false
			js(status, fixtureSandbox)
		case r.Method == "POST" && r.URL.Path == base+"/snapshots":
			js(http.StatusCreated, fixtureSnapshotInfo)
		default:
			return false
		}
		return true
	}
	return p
}

// pausingSandbox creates a sandbox on a new pausingFake, closed at the
// test's end.
func pausingSandbox(t *testing.T) (*pausingFake, context.Context, *sandboxes.Sandbox) {
	t.Helper()
	f := newPausingFake(t)
	ctx := ctxT(t, time.Minute)
	sb, err := sandboxes.Create(ctx, f.config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return f, ctx, sb
}

func TestFixturePauseResume(t *testing.T) {
	f, ctx, sb := pausingSandbox(t)
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	req, body := f.find("POST", "/sandboxes/"+fixtureID+"/pause")
	if req == nil || body != `{"memory":true}` || req.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("pause request %v body %q", req, body)
	}
	if info, err := sb.Info(ctx); err != nil || info.Status != sandboxes.StatusPaused {
		t.Fatalf("info after pause: %+v %v", info, err)
	}
	// Paused already (here by us, or by another client): done, as the SDK.
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("second pause: %v", err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	_, body = f.find("POST", "/sandboxes/"+fixtureID+"/connect")
	var conn struct {
		Timeout int64 `json:"timeout"`
	}
	if err := json.Unmarshal([]byte(body), &conn); err != nil {
		t.Fatalf("connect body %q: %v", body, err)
	}
	// The lifetime clock stopped at the pause: it resumes with the ~10
	// minutes it had left, not E2B's default.
	if conn.Timeout < 500 || conn.Timeout > 600 {
		t.Errorf("resume timeout %d s, want what was left (~600)", conn.Timeout)
	}
	if info, err := sb.Info(ctx); err != nil || info.Status != "running" {
		t.Fatalf("info after resume: %+v %v", info, err)
	}
	// Resume of a running sandbox only extends its life (200).
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("resume of a running sandbox: %v", err)
	}
}

func TestFixtureSnapshotFork(t *testing.T) {
	f, ctx, sb := pausingSandbox(t)
	if err := sb.Snapshot(ctx, "fixture-snap"); err != nil {
		t.Fatal(err)
	}
	if _, body := f.find("POST", "/sandboxes/"+fixtureID+"/snapshots"); body != `{"name":"fixture-snap"}` {
		t.Errorf("snapshot body %q", body)
	}
	// Names that are no E2B template name are refused before any request.
	n := f.count()
	for _, bad := range []string{"", "../x", "a b", "x?y", "-x", strings.Repeat("a", 200), "a/b/c"} {
		if err := sb.Snapshot(ctx, bad); !errors.Is(err, sandboxes.ErrInvalidInput) {
			t.Errorf("snapshot %q = %v, want ErrInvalidInput", bad, err)
		}
	}
	if f.count() != n {
		t.Errorf("a bad snapshot name was sent")
	}

	// A fork: the snapshot is the new sandbox's template.
	cfg := f.config()
	cfg.Snapshot = "fixture-snap"
	fork, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer fork.Close()
	var bodies []string
	f.mu.Lock()
	for i, r := range f.requests {
		if r.Method == "POST" && r.URL.Path == "/sandboxes" {
			bodies = append(bodies, f.bodies[i])
		}
	}
	f.mu.Unlock()
	if len(bodies) != 2 || !strings.Contains(bodies[1], `"templateID":"fixture-snap"`) {
		t.Errorf("fork create bodies %q", bodies)
	}
	cfg.Environment = "python"
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) {
		t.Errorf("fork with an environment = %v, want ErrInvalidConfig", err)
	}

	// A snapshot that does not exist: ErrNotFound saying so.
	f.override = func(w http.ResponseWriter, r *http.Request, body string) bool {
		if r.Method == "POST" && r.URL.Path == "/sandboxes" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"code":404,"message":"template 'nope' not found"}`)
			return true
		}
		return false
	}
	cfg.Environment, cfg.Snapshot = "", "nope"
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrNotFound) || !strings.Contains(err.Error(), `snapshot "nope" does not exist`) {
		t.Errorf("fork of a missing snapshot = %v", err)
	}
}

// TestFixturePauseHostile: whatever E2B (or something posing as it)
// answers, the caller gets a clear, matchable error, and reads are bounded.
func TestFixturePauseHostile(t *testing.T) {
	f, ctx, sb := pausingSandbox(t)
	answer := func(path string, status int, body string) {
		inner := f.override
		f.override = func(w http.ResponseWriter, r *http.Request, b string) bool {
			if r.Method == "POST" && r.URL.Path == path {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body)
				return true
			}
			return inner(w, r, b)
		}
		t.Cleanup(func() { f.override = inner })
	}
	base := "/sandboxes/" + fixtureID

	cases := []struct {
		name, path string
		status     int
		body       string
		call       func() error
		want       error
		says       string
	}{
		{"pause 404", base + "/pause", 404, `{"code":404,"message":"sandbox not found"}`, func() error { return sb.Pause(ctx) }, sandboxes.ErrNotFound, "expired or was killed"},
		{"pause 500", base + "/pause", 500, `{"code":500,"message":"Error pausing sandbox"}`, func() error { return sb.Pause(ctx) }, sandboxes.ErrUnavailable, "Error pausing sandbox"},
		{"pause 501", base + "/pause", 501, `{"code":501,"message":"pause needs isolation gvisor"}`, func() error { return sb.Pause(ctx) }, sandboxes.ErrNotSupported, "gvisor"},
		{"pause 500 html", base + "/pause", 500, "<html>" + strings.Repeat("x", 1<<20), func() error { return sb.Pause(ctx) }, sandboxes.ErrUnavailable, "<html>"},
		{"resume 404", base + "/connect", 404, `{"code":404,"message":"paused sandbox not found"}`, func() error { return sb.Resume(ctx) }, sandboxes.ErrNotFound, "paused sandbox not found"},
		{"resume wrong id", base + "/connect", 201, strings.Replace(fixtureSandbox, fixtureID, "iother0000000000000000", 1), func() error { return sb.Resume(ctx) }, sandboxes.ErrUnavailable, "another sandbox"},
		{"resume huge", base + "/connect", 201, `{"sandboxID":"` + strings.Repeat("a", 9<<20) + `"}`, func() error { return sb.Resume(ctx) }, nil, "larger than"},
		{"resume garbage", base + "/connect", 201, `{"sandboxID":`, func() error { return sb.Resume(ctx) }, nil, "decoding"},
		{"snapshot 400", base + "/snapshots", 400, `{"code":400,"message":"invalid name"}`, func() error { return sb.Snapshot(ctx, "x") }, sandboxes.ErrInvalidInput, `refused the snapshot name "x"`},
		{"snapshot 409", base + "/snapshots", 409, `{"code":409,"message":"sandbox is being snapshotted"}`, func() error { return sb.Snapshot(ctx, "x") }, sberr.ErrAlreadyExists, "being snapshotted"},
		{"snapshot no id", base + "/snapshots", 201, `{"names":[]}`, func() error { return sb.Snapshot(ctx, "x") }, sandboxes.ErrUnavailable, "no snapshotID"},
		{"snapshot huge", base + "/snapshots", 201, `{"snapshotID":"` + strings.Repeat("a", 9<<20) + `"}`, func() error { return sb.Snapshot(ctx, "x") }, nil, "larger than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			answer(c.path, c.status, c.body)
			err := c.call()
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("= %v, want %v saying %q", err, c.want, c.says)
			}
			if len(err.Error()) > 2048 {
				t.Errorf("error of %d bytes: the answer was not clipped", len(err.Error()))
			}
		})
	}
}

func TestFixturePauseDebug(t *testing.T) {
	t.Setenv("E2B_DEBUG", "true")
	for _, k := range []string{"E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL"} {
		t.Setenv(k, "")
	}
	ctx := ctxT(t, time.Minute)
	sb, err := sandboxes.Create(ctx, sandboxes.Config{Variant: "e2b"})
	if err != nil {
		t.Fatalf("debug mode create: %v", err)
	}
	defer sb.Close()
	if err := sb.Pause(ctx); !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "debug") {
		t.Errorf("pause in debug mode = %v", err)
	}
}

// TestPauseAgainstOurServer: the variant's pause and resume against a real
// E2B-compatible host (code-sandboxes serve, isolation gvisor): the
// kernel's state survives.
func TestPauseAgainstOurServer(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	_, err := exec.LookPath("runsc")
	testdep.Require(t, err == nil, "gVisor's runsc (apt-get install runsc; make deps)")
	testdep.Require(t, os.Geteuid() == 0, "root (isolation gvisor on the local variant runs runsc as root)")
	t.Setenv("CODE_SANDBOXES_STATE_DIR", t.TempDir())
	url := e2bServerWith(t, func(c *sandboxes.Config) { c.Isolation = sandboxes.IsolationGVisor })
	ctx := ctxT(t, 3*time.Minute)
	sb, err := sandboxes.Create(ctx, serverConfig(url))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if ex, err := sb.RunCode(ctx, "x = 40"); err != nil || ex.Error != nil {
		t.Fatalf("x = 40: %v %v", err, ex)
	}
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if info, err := sb.Info(ctx); err != nil || info.Status != sandboxes.StatusPaused {
		t.Fatalf("Info after Pause: %q %v", info.Status, err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	ex, err := sb.RunCode(ctx, "x + 2")
	if err != nil || ex.Error != nil || ex.Text() != "42" {
		t.Fatalf("x + 2 after resume: %v %+v", err, ex)
	}
}
