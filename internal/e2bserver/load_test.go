package e2bserver

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

var (
	loadTeams       = flag.Int("load.teams", 4, "TestLoadTeams: teams (one API key each)")
	loadPerTeam     = flag.Int("load.per-team", 25, "TestLoadTeams: sandboxes per team (3 under -short)")
	loadConcurrency = flag.Int("load.concurrency", 8, "TestLoadTeams: sandboxes in use at once, all teams together")
)

// TestLoadTeams: teams × sandboxes created, used (code, files, a tunnelled
// HTTP server) and killed concurrently through the official JS SDK, with
// every team capped by a quota: no error, no team sees another's sandbox,
// nothing left afterwards. Bounded by a 15-minute deadline.
func TestLoadTeams(t *testing.T) {
	needSandboxes(t)
	node, npm := needNode(t)
	npmCI(t, npm)
	perTeam := *loadPerTeam
	if testing.Short() {
		perTeam = 3
	}
	var keys []Key
	var raw []string
	for i := range *loadTeams {
		k := fmt.Sprintf("e2b_%040x", i+1)
		keys = append(keys, Key{Key: k, Team: fmt.Sprintf("team-%d", i)})
		raw = append(raw, k)
	}
	s, url := testServer(t, Options{Keys: keys, Quota: Quota{Sandboxes: perTeam},
		Config: sandboxes.Config{Memory: 512 << 20, CPU: 1}})

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "load.test.mjs")
	cmd.Dir = e2bjsDir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY=", "E2B_DEBUG=", "E2B_DOMAIN=localhost",
		"LOAD_KEYS="+strings.Join(raw, ","), "LOAD_PER_TEAM="+strconv.Itoa(perTeam), "LOAD_CONCURRENCY="+strconv.Itoa(*loadConcurrency))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var rep struct {
		Teams, PerTeam, Concurrency, Created, Killed int
		Errors, CrossTeam                            []map[string]any
		Left                                         []string
		WallMs                                       float64
		Timings                                      map[string]struct{ N, P50, P95 float64 }
	}
	if err := json.Unmarshal(bytes.TrimSpace(lastLine(stdout.Bytes())), &rep); err != nil {
		t.Fatalf("node: %v; output not JSON: %v\nstdout: %s\nstderr: %s", runErr, err, stdout.String(), stderr.String())
	}
	t.Logf("RESULT load: %d teams × %d sandboxes, %d at once: %d created, %d killed, %d errors, %d cross-team sightings, %d left, %.1f s wall",
		rep.Teams, rep.PerTeam, rep.Concurrency, rep.Created, rep.Killed, len(rep.Errors), len(rep.CrossTeam), len(rep.Left), rep.WallMs/1000)
	for _, k := range []string{"create", "runCode", "files", "tunnel", "kill"} {
		tm := rep.Timings[k]
		t.Logf("RESULT load %s: n=%.0f p50 %.0f ms p95 %.0f ms", k, tm.N, tm.P50, tm.P95)
	}
	total := *loadTeams * perTeam
	if runErr != nil || len(rep.Errors) != 0 || rep.Created != total || rep.Killed != total {
		t.Errorf("node %v; errors: %v", runErr, rep.Errors)
	}
	if len(rep.CrossTeam) != 0 {
		t.Errorf("cross-team visibility: %v", rep.CrossTeam)
	}
	if len(rep.Left) != 0 || len(s.Created()) != 0 {
		t.Errorf("left after the run: listed %v, held %v", rep.Left, s.Created())
	}
	if left, _ := sandboxes.List(context.Background(), s.cfg, sandboxes.ListOptions{}); len(left) != 0 {
		t.Errorf("%d sandboxes still exist", len(left))
	}
}
