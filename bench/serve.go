package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/e2b"
	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

var (
	onlyServe = flag.Bool("serve-only", false, "measure only serve's routing cost and tunnel throughput; print the section, leave -o alone")
	tunnelMiB = flag.Int("tunnel-mib", 64, "size of the file fetched through the tunnel, MiB")
)

// serveBench measures what serve adds: the round trip of x + 2 by the same
// HTTP client straight to the agent's socket and through serve, the e2b
// variant through serve against the local variant, and HTTP throughput of
// a server in the sandbox through serve's tunnel against the local
// variant's own forwarder (Sandbox.Host).
func serveBench(ctx context.Context, rep *strings.Builder, cfg sandboxes.Config) {
	const key = "e2b_0123456789abcdef0123456789abcdef01234567"
	srv, err := e2bserver.New(e2bserver.Options{APIKeys: []string{key}, Config: cfg})
	check(err)
	base, stopServer, err := srv.StartLoopback(false)
	check(err)
	defer func() { check(stopServer()) }()

	// One sandbox through serve's API; the same sandbox reached directly.
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/sandboxes", strings.NewReader(`{"templateID":"base","timeout":3600}`))
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	check(err)
	var sb struct{ SandboxID, EnvdAccessToken string }
	check(json.NewDecoder(resp.Body).Decode(&sb))
	resp.Body.Close()
	direct, err := sandboxes.Get(ctx, cfg, sb.SandboxID)
	check(err)
	defer direct.Detach()
	agentURL, agentClient := agentHTTP(cfg, sb.SandboxID)

	execute := func(hc *http.Client, url string, routed bool) float64 {
		t := time.Now()
		r, _ := http.NewRequestWithContext(ctx, "POST", url+"/execute", strings.NewReader(`{"code":"x + 2"}`))
		r.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		if routed {
			r.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
			r.Header.Set("E2b-Sandbox-Port", "49999")
		}
		resp, err := hc.Do(r)
		check(err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"42"`) {
			check(fmt.Errorf("x + 2: %s", b))
		}
		return since(t)
	}
	tcp := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	_, err = direct.RunCode(ctx, "x = 40")
	check(err)
	execute(agentClient, agentURL, false)
	execute(tcp, base, true)
	var viaAgent, viaServe []float64
	for range *nRTT {
		// Interleaved, so that noise from the shared machine hits both.
		viaAgent = append(viaAgent, execute(agentClient, agentURL, false))
		viaServe = append(viaServe, execute(tcp, base, true))
	}
	localRTT := runCodeRTT(ctx, cfg)
	e2bRTT := runCodeRTT(ctx, sandboxes.Config{Variant: "e2b", Options: e2b.Options{APIKey: key, APIURL: base, SandboxURL: base}})
	a, s, lr, er := summarize(viaAgent), summarize(viaServe), summarize(localRTT), summarize(e2bRTT)
	rep.WriteString("## Routing cost of `serve`\n\n")
	fmt.Fprintf(rep, "Round trip of `x + 2`, %d each. First the same HTTP client posting `/execute` straight to the agent's unix socket and to `serve` on loopback TCP (interleaved); `serve` authenticates the token, routes by `E2b-Sandbox-Id`, strips routing headers and proxies to that same socket. Then whole clients: the local variant (Go API) against the e2b variant through `serve`.\n\n", *nRTT)
	fmt.Fprintf(rep, "| path | p50 | %s | p50 overhead |\n|---|---|---|---|\n", a.tailName())
	fmt.Fprintf(rep, "| HTTP → agent socket | %.3f ms | %.3f ms | |\n", a.p50, a.tail())
	fmt.Fprintf(rep, "| HTTP → serve → agent socket | %.3f ms | %.3f ms | +%.3f ms (goal ≤ 0.1 ms) |\n", s.p50, s.tail(), s.p50-a.p50)
	fmt.Fprintf(rep, "| local variant (Go API) | %.3f ms | %.3f ms | |\n", lr.p50, lr.tail())
	fmt.Fprintf(rep, "| e2b variant → serve → agent | %.3f ms | %.3f ms | +%.3f ms |\n\n", er.p50, er.tail(), er.p50-lr.p50)

	// Tunnel throughput: a file served by python's http.server in the
	// sandbox, fetched through serve (E2B's host form) and through the
	// local variant's forwarder.
	mib := *tunnelMiB
	_, err = direct.RunCode(ctx, fmt.Sprintf(`import subprocess, sys, time, socket, os
open("/tmp/blob", "wb").write(os.urandom(%d << 20))
subprocess.Popen([sys.executable, "-m", "http.server", "8000", "--bind", "127.0.0.1"], cwd="/tmp", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
for _ in range(200):
    try:
        socket.create_connection(("127.0.0.1", 8000)).close(); break
    except OSError:
        time.sleep(0.05)`, mib))
	check(err)
	hostAddr, err := direct.Host(ctx, 8000)
	check(err)
	fetch := func(url, host string) float64 {
		t := time.Now()
		r, _ := http.NewRequestWithContext(ctx, "GET", url+"/blob", nil)
		if host != "" {
			r.Host = host
		}
		resp, err := tcp.Do(r)
		check(err)
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		check(err)
		if n != int64(mib)<<20 {
			check(fmt.Errorf("tunnel: got %d bytes", n))
		}
		return float64(mib) / time.Since(t).Seconds()
	}
	var viaHost, viaTunnel []float64
	for range 5 {
		viaHost = append(viaHost, fetch("http://"+hostAddr, ""))
		viaTunnel = append(viaTunnel, fetch(base, fmt.Sprintf("8000-%s.localhost", sb.SandboxID)))
	}
	h, tn := summarize(viaHost), summarize(viaTunnel)
	rep.WriteString("## Tunnelled HTTP throughput\n\n")
	fmt.Fprintf(rep, "A %d MiB file from `python3 -m http.server` in a sandbox with network none, 5 fetches each (interleaved), median MiB/s.\n\n", mib)
	rep.WriteString("| path | MiB/s | ratio |\n|---|---|---|\n")
	fmt.Fprintf(rep, "| `Sandbox.Host(8000)` (the local variant's forwarder) | %.0f | 1× |\n", h.p50)
	fmt.Fprintf(rep, "| `serve`, host `8000-<id>.localhost` | %.0f | %.2f× |\n\n", tn.p50, tn.p50/h.p50)
}

// agentHTTP is a plain HTTP client to the sandbox's agent socket, found in
// the local variant's runtime directory (the bench may look there; serve
// itself does not).
func agentHTTP(cfg sandboxes.Config, id string) (string, *http.Client) {
	return "http://sandbox", client.UnixHTTPClient(filepath.Join(local.SandboxDir(cfg.Local.RuntimeDir, id), "agent.sock"))
}
