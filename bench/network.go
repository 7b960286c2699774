package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testnet"
)

var (
	onlyNetwork = flag.Bool("only-network", false, "run only the network section")
	nConnect    = flag.Int("connects", 200, "TCP connects per network latency measurement")
	netMiB      = flag.Int("net-mib", 256, "MiB echoed per network throughput measurement")
)

// netScript measures, from wherever it runs, TCP connect latency to the
// test internet's echo server and the throughput of echoing netMiB through
// it (sent and received concurrently). The same script runs on the host and
// in a sandbox.
const netScript = `import socket, time, threading, json
H, N, TOTAL = %q, %d, %d << 20
lat = []
for i in range(N):
    t = time.perf_counter(); s = socket.create_connection((H, 7)); lat.append((time.perf_counter() - t) * 1000); s.close()
lat.sort()
s = socket.create_connection((H, 7))
def rd():
    got = 0
    while got < TOTAL:
        d = s.recv(1 << 20)
        if not d: break
        got += len(d)
buf = b"x" * 65536
t = time.perf_counter(); th = threading.Thread(target=rd); th.start(); sent = 0
while sent < TOTAL:
    s.sendall(buf); sent += len(buf)
th.join(); el = time.perf_counter() - t
print(json.dumps({"p50": lat[len(lat) // 2], "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))], "mibs": TOTAL / el / (1 << 20)}))
`

type netResult struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	MiBs float64 `json:"mibs"`
}

// netBench: the cost of network all's user-space stack, against the host
// reaching the same server directly. Needs root (the test internet).
func netBench(ctx context.Context, rep *strings.Builder) {
	rep.WriteString("## Network all (issue 12)\n\n")
	if os.Geteuid() != 0 {
		rep.WriteString("Skipped: needs root (the test internet is a network namespace with a veth pair).\n\n")
		return
	}
	n, err := testnet.Start()
	check(err)
	defer n.Close()
	os.Setenv("CODE_SANDBOXES_DNS", n.DNS)
	script := fmt.Sprintf(netScript, testnet.ServerIPv4, *nConnect, *netMiB)
	parse := func(b string) netResult {
		var r netResult
		check(json.Unmarshal([]byte(strings.TrimSpace(b)), &r))
		return r
	}
	hostOut, err := exec.Command(*python, "-c", script).Output()
	check(err)
	host := parse(string(hostOut))
	sb, err := sandboxes.Create(ctx, sandboxes.Config{NetworkPolicy: sandboxes.NetworkAll})
	check(err)
	ex, err := sb.RunCode(ctx, script)
	_ = sb.Close()
	check(err)
	if ex.Error != nil {
		check(fmt.Errorf("sandbox: %v: %s", ex.Error, ex.Stderr()))
	}
	in := parse(ex.Stdout())
	fmt.Fprintf(rep, "TCP to the test internet's echo server (%s, a network namespace behind a veth pair): %d connects, then %d MiB echoed (sent and read concurrently), by the same Python script on the host and in a local sandbox with network `all` (gVisor netstack in the supervisor, which dials out itself).\n\n", testnet.ServerIPv4, *nConnect, *netMiB)
	rep.WriteString("| measurement | host | sandbox (`all`) | ratio (sandbox/host) |\n|---|---|---|---|\n")
	fmt.Fprintf(rep, "| connect p50 | %.3f ms | %.3f ms | %.2f× |\n", host.P50, in.P50, in.P50/host.P50)
	fmt.Fprintf(rep, "| connect p99 | %.3f ms | %.3f ms | %.2f× |\n", host.P99, in.P99, in.P99/host.P99)
	fmt.Fprintf(rep, "| echo throughput | %.0f MiB/s | %.0f MiB/s | %.2f× |\n\n", host.MiBs, in.MiBs, in.MiBs/host.MiBs)
}
