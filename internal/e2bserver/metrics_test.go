package e2bserver

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// TestMetrics: E2B's sandbox metrics from the cgroup, and the server's
// Prometheus series behind their own token.
func TestMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	const metricsToken = "m-0123456789abcdef"
	_, base := testServer(t, Options{Config: sandboxes.Config{Memory: 256 << 20, CPU: 1}, MetricsToken: metricsToken,
		Keys: []Key{{Key: keyA, Team: "team-a"}, {Key: keyB, Team: "team-b"}}})
	a := createSB(t, base, keyA, `{"templateID":"base","timeout":120}`)
	// 8 MiB in tmpfs and a second of CPU.
	execute(t, base, a, "open('/tmp/blob', 'wb').write(b'x' * (8 << 20))\nimport time\nt = time.time()\nwhile time.time() - t < 1: pass")
	var ms []sandboxMetric
	if resp := call(t, "GET", base+"/sandboxes/"+a.SandboxID+"/metrics", keyA, "", nil, &ms); resp.StatusCode != 200 || len(ms) != 1 {
		t.Fatalf("metrics: %d %+v", resp.StatusCode, ms)
	}
	m := ms[0]
	if m.MemTotal != 256<<20 || m.CPUCount != 1 || m.MemUsed <= 0 || m.DiskUsed < 8<<20 || m.DiskTotal <= m.DiskUsed || m.CPUUsedPct <= 0 || m.TimestampUnix == 0 {
		t.Errorf("metric: %+v", m)
	}
	var multi struct{ Sandboxes map[string]sandboxMetric }
	call(t, "GET", base+"/sandboxes/metrics?sandbox_ids="+a.SandboxID+",nosuch", keyA, "", nil, &multi)
	if _, ok := multi.Sandboxes[a.SandboxID]; !ok || len(multi.Sandboxes) != 1 {
		t.Errorf("metrics of several: %+v", multi)
	}
	multi.Sandboxes = nil
	call(t, "GET", base+"/sandboxes/metrics?sandbox_ids="+a.SandboxID, keyB, "", nil, &multi)
	if len(multi.Sandboxes) != 0 {
		t.Errorf("team B reads team A's metrics: %+v", multi)
	}

	prom := func(hdr map[string]string) (int, string) { return getText(t, base+"/metrics", hdr) }
	for _, hdr := range []map[string]string{nil, {"X-API-Key": keyA}, {"Authorization": "Bearer " + keyA}} {
		if st, _ := prom(hdr); st != 401 {
			t.Errorf("/metrics with %v: %d, want 401", hdr, st)
		}
	}
	st, body := prom(map[string]string{"Authorization": "Bearer " + metricsToken})
	for _, want := range []string{
		`code_sandboxes_serve_sandboxes_running{team="team-a"} 1`,
		`code_sandboxes_serve_creates_total{result="ok",team="team-a"} 1`,
		`code_sandboxes_serve_api_seconds_bucket{route="POST /sandboxes"`,
		// The execution went over the agent's lean connection (proxy_execute.go).
		`code_sandboxes_serve_proxy_seconds_bucket{kind="execute",status="200"`,
	} {
		if st != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics: %d, lacks %s", st, want)
		}
	}
}

// TestMetricsDocker: the same sandbox metrics on the docker variant.
func TestMetricsDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	needDocker(t)
	const metricsToken = "m-0123456789abcdef"
	_, base := testServer(t, Options{Config: sandboxes.Config{Variant: "docker", Memory: 256 << 20, CPU: 1,
		EnvironmentDir: os.Getenv("CODE_SANDBOXES_TEST_ENV_DIR")}, MetricsToken: metricsToken})
	a := createSB(t, base, testKey, `{"templateID":"base","timeout":120}`)
	execute(t, base, a, "open('/tmp/blob', 'wb').write(b'x' * (8 << 20))\nimport time\nt = time.time()\nwhile time.time() - t < 1: pass")
	var ms []sandboxMetric
	if resp := call(t, "GET", base+"/sandboxes/"+a.SandboxID+"/metrics", testKey, "", nil, &ms); resp.StatusCode != 200 || len(ms) != 1 {
		t.Fatalf("metrics: %d %+v", resp.StatusCode, ms)
	}
	// /tmp is on the container's writable layer here, not a tmpfs: the
	// file shows as page cache rather than as disk (shmem).
	if m := ms[0]; m.MemTotal != 256<<20 || m.CPUCount != 1 || m.MemUsed <= 0 || m.DiskUsed+m.MemCache < 8<<20 || m.CPUUsedPct <= 0 {
		t.Errorf("metric: %+v", m)
	}
	// The execution went over the agent's lean connection, as on the local
	// variant (the docker client dials the agent itself).
	st, body := getText(t, base+"/metrics", map[string]string{"Authorization": "Bearer " + metricsToken})
	if want := `code_sandboxes_serve_proxy_seconds_bucket{kind="execute",status="200"`; st != 200 || !strings.Contains(body, want) {
		t.Errorf("/metrics: %d, lacks %s", st, want)
	}
}

// getText GETs u with the headers hdr: the status and the body.
func getText(t *testing.T, u string, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for k, v := range hdr {
		if strings.EqualFold(k, "Host") {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
