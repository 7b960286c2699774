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
// variant through serve against the local variant (interleaved), the local
// variant's round trip with serve running in the same process and without
// it, and HTTP throughput of
// a server in the sandbox through serve's tunnel against the local
// variant's own forwarder (Sandbox.Host).
func serveBench(ctx context.Context, rep *strings.Builder, cfg sandboxes.Config) {
	const key = "e2b_0123456789abcdef0123456789abcdef01234567"
	// The local variant's round trip in this process before serve runs in
	// it (half the block) and after it stopped (the other half), against
	// the same sandbox's while serve, its sandbox and the keep-alive
	// connections of the HTTP rows are alive: whether serve's presence
	// moves the local variant's round trip, measured in each run rather
	// than guessed from two sections' numbers.
	lsb := rttSandbox(ctx, cfg)
	defer lsb.Close()
	localDir := local.SandboxDir(cfg.Options.(local.Options).RuntimeDir, lsb.ID())
	rttBlock(ctx, lsb, 20) // untimed: a new sandbox's first cells are its warm-up, not serve's absence
	withoutServe, cpuWithout := cpuBlock(ctx, lsb, localDir, (*nRTT+1)/2)

	srv, err := e2bserver.New(e2bserver.Options{APIKeys: []string{key}, Config: cfg})
	check(err)
	base, stopServer, err := srv.StartLoopback(false)
	check(err)
	stopped := false
	defer func() {
		if !stopped {
			check(stopServer())
		}
	}()

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
	// The local variant in a row, serve alive beside it; then the whole
	// clients interleaved, so that the e2b variant's overhead is a paired
	// difference like the HTTP rows' (two blocks timed one after the other
	// differ by whatever the shared machine did in between).
	withServe, cpuWith := cpuBlock(ctx, lsb, localDir, *nRTT)
	remote := rttSandbox(ctx, sandboxes.Config{Variant: "e2b", Options: e2b.Options{APIKey: key, APIURL: base, SandboxURL: base}})
	var localPaired, e2bPaired []float64
	for range *nRTT {
		localPaired = append(localPaired, timeRunCode(ctx, lsb))
		e2bPaired = append(e2bPaired, timeRunCode(ctx, remote))
	}
	a, s := summarize(viaAgent), summarize(viaServe)
	lw, lp, er := summarize(withServe), summarize(localPaired), summarize(e2bPaired)

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

	check(remote.Close())
	stopped = true
	check(stopServer())
	after, cpuAfter := cpuBlock(ctx, lsb, localDir, *nRTT/2)
	withoutServe = append(withoutServe, after...)
	cpuWithout = (cpuWithout*float64((*nRTT+1)/2) + cpuAfter*float64(*nRTT/2)) / float64(len(withoutServe))
	lo := summarize(withoutServe)

	rep.WriteString("## Routing cost of `serve`\n\n")
	fmt.Fprintf(rep, "Round trip of `x + 2`, %d each. First the same HTTP client posting `/execute` straight to the agent's unix socket and to `serve` on loopback TCP (interleaved); `serve` authenticates the token, routes by `E2b-Sandbox-Id`, strips routing headers and proxies to that same socket. Then whole clients: the local variant (Go API) against the e2b variant through `serve`, interleaved.\n\n", *nRTT)
	fmt.Fprintf(rep, "| path | p50 | %s | p50 overhead |\n|---|---|---|---|\n", a.tailName())
	fmt.Fprintf(rep, "| HTTP → agent socket | %.3f ms | %.3f ms | |\n", a.p50, a.tail())
	fmt.Fprintf(rep, "| HTTP → serve → agent socket | %.3f ms | %.3f ms | +%.3f ms (goal ≤ 0.1 ms) |\n", s.p50, s.tail(), s.p50-a.p50)
	fmt.Fprintf(rep, "| local variant (Go API), interleaved with the next row | %.3f ms | %.3f ms | |\n", lp.p50, lp.tail())
	fmt.Fprintf(rep, "| e2b variant → serve → agent | %.3f ms | %.3f ms | +%.3f ms |\n\n", er.p50, er.tail(), er.p50-lp.p50)
	fmt.Fprintf(rep, "Does `serve` in the same process slow the local variant? One local sandbox's round trips in a row (%d each): with this process also running `serve` (its listener, a second sandbox created through it, the keep-alive connections of the rows above), and without (half before `serve` started, half after it stopped). CPU per round trip: this process's and the sandbox's processes' (`/proc/PID/task/*/schedstat`), which the machine's other load moves less than wall time.\n\n", *nRTT)
	fmt.Fprintf(rep, "| local variant (Go API), in a row | p50 | %s | CPU per round trip |\n|---|---|---|---|\n", lw.tailName())
	fmt.Fprintf(rep, "| without `serve` in the process | %.3f ms | %.3f ms | %.3f ms |\n", lo.p50, lo.tail(), cpuWithout)
	fmt.Fprintf(rep, "| with `serve` and its sandbox alive | %.3f ms | %.3f ms | %.3f ms |\n\n", lw.p50, lw.tail(), cpuWith)
	fmt.Fprintf(rep, "With `serve`: %.2f× the p50 without, %.2f× the CPU per round trip.\n\n", lw.p50/max(lo.p50, 1e-9), cpuWith/max(cpuWithout, 1e-9))

	rep.WriteString("## Tunnelled HTTP throughput\n\n")
	fmt.Fprintf(rep, "A %d MiB file from `python3 -m http.server` in a sandbox with network none, 5 fetches each (interleaved), median MiB/s.\n\n", mib)
	rep.WriteString("| path | MiB/s | ratio |\n|---|---|---|\n")
	fmt.Fprintf(rep, "| `Sandbox.Host(8000)` (the local variant's forwarder) | %.0f | 1× |\n", h.p50)
	fmt.Fprintf(rep, "| `serve`, host `8000-<id>.localhost` | %.0f | %.2f× |\n\n", tn.p50, tn.p50/h.p50)
}

// agentHTTP is a plain HTTP client to the sandbox's agent socket, found in
// the local variant's runtime directory (the bench may look there; serve
// itself does not).
// cpuBlock is rttBlock with the CPU per round trip (ms) of this process and
// the processes of the sandbox in dir.
func cpuBlock(ctx context.Context, sb *sandboxes.Sandbox, dir string, n int) ([]float64, float64) {
	c0 := selfCPU() + sandboxCPU(dir)
	ms := rttBlock(ctx, sb, n)
	return ms, (selfCPU() + sandboxCPU(dir) - c0) / float64(max(n, 1))
}

func agentHTTP(cfg sandboxes.Config, id string) (string, *http.Client) {
	return "http://sandbox", client.UnixHTTPClient(filepath.Join(local.SandboxDir(cfg.Options.(local.Options).RuntimeDir, id), "agent.sock"))
}
