//go:build !localonly

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	k8svariant "github.com/code-sandboxes/code-sandboxes/kubernetes"
	"github.com/code-sandboxes/code-sandboxes/local"
	"github.com/code-sandboxes/code-sandboxes/mcptools"
)

// serveCmd is `code-sandboxes serve`: a self-hosted E2B on one listener.
func serveCmd() *cobra.Command {
	var (
		listen, apiKey, keyFile, runtimeDir, network, memory, variant string
		maxNetwork                                                    string
		totalMemory, metricsToken, logFormat, isolation               string
		cpu, totalCPU                                                 float64
		maxSandboxes, createsPerMinute, warmPool                      int
		maxTimeout                                                    time.Duration
		maxSnapshots, maxPaused                                       int
		keep, verbose, requireTraffic, templateBuilds, allowPrivate   bool
		k8sEnforced, allowInsecure                                    bool
		toolServers                                                   []string
		templateLoopback                                              []int
		templateUploadQuota                                           string
		vols                                                          serveVolumes
		webConsole                                                    bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the E2B API (control and data plane) so that E2B's official SDKs run on our sandboxes",
		Long: `Serve the E2B API on one listener: the control plane (create, list, get,
kill, timeout, connect) and the data plane (envd and the code interpreter,
proxied to each sandbox's agent). Point the official SDKs at it with

  E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:3000 E2B_API_KEY=e2b_…

Each API key acts for a team, and a team sees only its own sandboxes. The
keys are --api-key (team "default") and those in --api-key-file, else
$E2B_API_KEY, else one is generated and printed. The key file has one key a
line: the key, optionally a team name, optionally the team's quotas as
name=value (sandboxes, memory, cpu, total-memory, total-cpu,
creates-per-minute), e.g.

  e2b_0123…  team-a  sandboxes=25 total-memory=16G
  e2b_4567…  team-b

It is re-read on SIGHUP (a bad file keeps the old keys, with an error).

Every sandbox gets --memory and --cpu (default 1G and 1 core: one
runaway sandbox can't starve the machine or its neighbours, and a Python
kernel with the usual data libraries fits well within it).
When allowInternetAccess is not given at create (the JS SDK's default), the
sandbox gets --default-network: none unless you choose all (E2B's default).
--max-network is the most network a request may ask for (none < allowlist
< all; allowlist: network.denyOut ["0.0.0.0/0"] with allowOut exceptions):
a create, network update or resume above it is refused with 403, never
narrowed. E2B's Python SDK asks for allowInternetAccess true on every
create, so --default-network none alone does not keep its sandboxes
offline; --max-network none does (its users then pass
allow_internet_access=False).
On SIGINT or SIGTERM the sandboxes this server created are killed, unless
--keep-sandboxes (a later serve on the same variant adopts them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mem, err := parseSize(memory)
			if err != nil {
				return err
			}
			uploadQuota, err := parseSize(templateUploadQuota)
			if err == nil && uploadQuota <= 0 {
				err = errors.New("give a size such as 2G (there is no unlimited: one team could fill the disk for all)")
			}
			if err != nil {
				return fmt.Errorf("--template-upload-quota: %w", err)
			}
			totalMem, err := parseSize(totalMemory)
			if err != nil {
				return err
			}
			generated := false
			var keys []e2bserver.Key
			if apiKey != "" {
				keys = append(keys, e2bserver.Key{Key: apiKey, Team: "default"})
			}
			if keyFile != "" {
				fileKeys, err := readKeyFile(keyFile)
				if err != nil {
					return err
				}
				keys = append(keys, fileKeys...)
			}
			if len(keys) == 0 && os.Getenv("E2B_API_KEY") != "" {
				keys = append(keys, e2bserver.Key{Key: os.Getenv("E2B_API_KEY"), Team: "default"})
			}
			if len(keys) == 0 {
				var b [20]byte
				_, _ = rand.Read(b[:])
				apiKey, generated = "e2b_"+hex.EncodeToString(b[:]), true
				keys = append(keys, e2bserver.Key{Key: apiKey, Team: "default"})
			}
			if k8sEnforced {
				if variant != "kubernetes" {
					return fmt.Errorf("--k8s-network-policy-enforced is for --variant kubernetes, not %s", variant)
				}
				if err := os.Setenv(k8svariant.NetworkPolicyEnforcedEnv, "1"); err != nil {
					return err
				}
			}
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			hopts := &slog.HandlerOptions{Level: level}
			var handler slog.Handler = slog.NewTextHandler(cmd.ErrOrStderr(), hopts)
			switch logFormat {
			case "text":
			case "json":
				handler = slog.NewJSONHandler(cmd.ErrOrStderr(), hopts)
			default:
				return fmt.Errorf("--log-format %q: use text or json", logFormat)
			}
			logger := slog.New(handler)
			toolSets := map[string][]sandboxes.Tool{}
			for _, ts := range toolServers {
				name, spec, ok := strings.Cut(ts, "=")
				if !ok || name == "" || strings.TrimSpace(spec) == "" {
					return fmt.Errorf("--tool-server %q: give NAME=COMMAND or NAME=URL", ts)
				}
				if _, dup := toolSets[name]; dup {
					return fmt.Errorf("--tool-server: the name %q is given twice", name)
				}
				dctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
				cs, err := mcptools.Dial(dctx, spec)
				if err == nil {
					toolSets[name], err = mcptools.Tools(dctx, cs)
					defer cs.Close()
				}
				cancel()
				if err != nil {
					return fmt.Errorf("--tool-server %s: %w", name, err)
				}
			}
			var vo e2bserver.Options
			if err := vols.apply(&vo); err != nil {
				return err
			}
			cfg := sandboxes.Config{Variant: variant, Memory: mem, CPU: cpu, IdleTimeout: sandboxes.NoIdleTimeout,
				Isolation: sandboxes.Isolation(isolation)}
			if isLocal(variant) {
				cfg.Options = local.Options{RuntimeDir: runtimeDir, WarmPool: warmPool}
			}
			srv, err := e2bserver.New(e2bserver.Options{
				VolumeDir: vo.VolumeDir, VolumeSize: vo.VolumeSize, MaxVolumes: vo.MaxVolumes,
				ToolSets: toolSets,
				Keys:     keys,
				// E2B's lifetime is its timeout, extended only by
				// setTimeout: no idle timeout behind serve.
				Config: cfg,
				Quota: e2bserver.Quota{Sandboxes: maxSandboxes, TotalMemory: totalMem, TotalCPU: totalCPU,
					CreatesPerMinute: createsPerMinute},
				DefaultNetwork:         network,
				MaxNetwork:             maxNetwork,
				RequireTrafficToken:    requireTraffic,
				AllowInsecureSandboxes: allowInsecure,
				AllowPrivate:           allowPrivate,
				TemplateBuilds:         templateBuilds,
				TemplateLoopback:       templateLoopback,
				TemplateUploadQuota:    uploadQuota,
				MetricsToken:           metricsToken,
				MaxTimeout:             maxTimeout,
				MaxSnapshots:           maxSnapshots,
				MaxPaused:              maxPaused,
				Logger:                 logger,
				Console:                webConsole,
			})
			if err != nil {
				return err
			}
			if keyFile != "" {
				hup := make(chan os.Signal, 1)
				signal.Notify(hup, syscall.SIGHUP)
				defer signal.Stop(hup)
				go func() {
					for range hup {
						fileKeys, err := readKeyFile(keyFile)
						if err == nil {
							if apiKey != "" {
								fileKeys = append(fileKeys, e2bserver.Key{Key: apiKey, Team: "default"})
							}
							err = srv.SetKeys(fileKeys)
						}
						if err != nil {
							logger.Error("reloading the key file; the old keys stay", "file", keyFile, "error", err)
							continue
						}
						logger.Info("reloaded the key file", "file", keyFile, "keys", len(fileKeys))
					}
				}()
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			url := "http://" + ln.Addr().String()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "E2B_API_URL=%s\nE2B_SANDBOX_URL=%s\nE2B_VOLUME_API_URL=%s\n", url, url, url)
			if generated {
				fmt.Fprintf(out, "E2B_API_KEY=%s\n", apiKey)
			}
			// The pools' waiting sandboxes go with the server, --keep-sandboxes
			// or not: they are nobody's yet.
			defer func() {
				pctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				local.CloseWarmPools(pctx)
			}()
			return srv.Run(cmd.Context(), ln, keep)
		},
	}
	f := cmd.Flags()
	vols.register(f)
	f.StringVar(&listen, "listen", "127.0.0.1:3000", "address to listen on (API and sandbox traffic)")
	f.StringVar(&variant, "variant", "local", "variant that runs the sandboxes: local, docker or kubernetes (its settings come from the usual environment: DOCKER_HOST, KUBECONFIG, …)")
	f.StringVar(&keyFile, "api-key-file", "", "file of API keys: one a line, `key [team] [quota=value…]` (# comments allowed; mode 600); re-read on SIGHUP")
	f.StringVar(&apiKey, "api-key", "", "accepted API key of the team \"default\", e2b_<hex> (default $E2B_API_KEY, else generated and printed)")
	f.StringVar(&runtimeDir, "runtime-dir", "", "local variant: where sandbox records live (default $CODE_SANDBOXES_RUNTIME_DIR, /run/code-sandboxes or $XDG_RUNTIME_DIR)")
	f.StringVar(&isolation, "isolation", "", "isolation level of every sandbox: namespaces (the default) or gvisor (gVisor's user-space kernel: local as root with runsc, docker with the engine's runsc runtime, kubernetes through a RuntimeClass)")
	f.StringVar(&network, "default-network", sandboxes.NetworkNone, "network of sandboxes created without allowInternetAccess: none or all")
	f.StringVar(&maxNetwork, "max-network", sandboxes.NetworkAll, "the most network a request may give a sandbox: none, allowlist (denyOut 0.0.0.0/0 with allowOut exceptions) or all; above it a create, network update or resume is refused with 403, never narrowed (--default-network must be at or below it)")
	f.StringVar(&memory, "memory", "1G", "memory limit of every sandbox, e.g. 512M or 2G (a team's memory= quota overrides it)")
	f.Float64Var(&cpu, "cpu", 1, "CPU limit of every sandbox, in cores (a team's cpu= quota overrides it)")
	f.IntVar(&maxSandboxes, "max-sandboxes", 0, "sandboxes a team may run at once (0 = no limit)")
	f.StringVar(&totalMemory, "max-total-memory", "", "memory a team's sandboxes may have in all, e.g. 16G (\"\" = no limit)")
	f.Float64Var(&totalCPU, "max-total-cpu", 0, "CPU cores a team's sandboxes may have in all (0 = no limit)")
	f.IntVar(&createsPerMinute, "max-creates-per-minute", 0, "sandboxes a team may create per minute (0 = no limit)")
	f.BoolVar(&templateBuilds, "template-builds", false, "answer E2B's template build API (Template.build): teams' build steps run on this machine jailed (a user namespace of their own, never host root; the internet through the egress policy, never the host's own addresses; SECURITY.md)")
	f.StringVar(&templateUploadQuota, "template-upload-quota", "2G", "bytes of template files (the archives of COPY steps) a team may keep stored on this machine, e.g. 500M or 4G; files go with their template, and unused ones after a day")
	f.IntSliceVar(&templateLoopback, "template-build-loopback-port", nil, "a TCP port of this machine's loopback that template build steps may reach at 127.0.0.1:<port> (a package index served here); repeatable; none by default")
	f.BoolVar(&allowPrivate, "allow-private", false, "let sandboxes with network reach the private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) and let allowOut list them; never the host itself, loopback or cloud metadata")
	f.BoolVar(&k8sEnforced, "k8s-network-policy-enforced", false, "--variant kubernetes: assert that the cluster's network plugin enforces NetworkPolicy, for a plugin the variant can neither see in kube-system nor prove with a sandbox's pod (docs/kubernetes.md); every network policy there needs one")
	f.BoolVar(&requireTraffic, "require-traffic-token", false, "every tunnel to a sandbox port needs the sandbox's trafficAccessToken (as with allowPublicTraffic false), not only private sandboxes'")
	f.BoolVar(&allowInsecure, "allow-insecure-sandboxes", false, "accept E2B's secure: false at create: that sandbox's envd (commands, files, code) then answers anyone who can reach this server and knows the sandbox's id, without a token; the API (create, connect, kill) still needs the team's key")
	f.StringVar(&metricsToken, "metrics-token", "", "serve Prometheus metrics at GET /metrics to requests with Authorization: Bearer <this> (\"\" = off)")
	f.StringVar(&logFormat, "log-format", "text", "log format on stderr: text or json")
	f.DurationVar(&maxTimeout, "max-timeout", 24*time.Hour, "longest sandbox timeout a client may ask for")
	f.IntVar(&maxSnapshots, "max-snapshots", 20, "most snapshots a team keeps (each a whole sandbox's checkpoint on disk; --isolation gvisor)")
	f.IntVar(&maxPaused, "max-paused", 20, "most paused sandboxes a team keeps, counting autoPause ones from their create (each a checkpoint on disk; paused ones don't count against the quotas; --isolation gvisor)")
	f.IntVar(&warmPool, "warm-pool", 0, "local variant: keep this many sandboxes started ahead for each shape of create that can use one (network none, no envVars, one team's memory and cpu), handed out in about a millisecond")
	f.BoolVar(&keep, "keep-sandboxes", false, "leave the sandboxes this server created running when it stops")
	f.BoolVar(&verbose, "verbose", false, "log every API call")
	f.BoolVar(&webConsole, "console", true, "serve the web console at / (a team signs in with its API key; --console=false turns it off)")
	f.StringArrayVar(&toolServers, "tool-server", nil, "NAME=COMMAND or NAME=URL: an MCP server (a command line serving stdio, split on spaces, or a streamable HTTP URL) whose tools a create request may grant its sandbox's code, with our body field \"tools\": [\"NAME\", \"NAME.tool\"] or metadata code-sandboxes/tools=NAME (docs/agent-protocol.md); repeatable")
	return cmd
}

// parseCPUQuota is a CPU count: NaN and the infinities parse as floats
// but are no quota (NaN compares false with every limit, so a total of
// NaN would never refuse anything).
func parseCPUQuota(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
		err = fmt.Errorf("%q is not a number of CPUs", v)
	}
	return f, err
}

// readKeyFile reads API keys, one a line: the key, an optional team name
// and optional quota=value fields; blank lines and # comments skipped. A
// key file readable by others is refused: it holds credentials.
func readKeyFile(path string) ([]e2bserver.Key, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--api-key-file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--api-key-file %s is readable by group or others (mode %v); chmod 600 it", path, st.Mode().Perm())
	}
	if st.Size() > 16<<20 {
		return nil, fmt.Errorf("--api-key-file %s is larger than 16 MiB", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--api-key-file: %w", err)
	}
	return parseKeyFile(path, b)
}

// parseKeyFile parses a key file's bytes (readKeyFile; path is for the
// messages).
func parseKeyFile(path string, b []byte) ([]e2bserver.Key, error) {
	var keys []e2bserver.Key
	for i, line := range strings.Split(string(b), "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("--api-key-file %s line %d: "+format, append([]any{path, i + 1}, a...)...)
		}
		if !e2bserver.ValidAPIKey(fields[0]) {
			return nil, bad("not an E2B API key (e2b_ followed by lowercase hex)")
		}
		k := e2bserver.Key{Key: fields[0]}
		rest := fields[1:]
		if len(rest) > 0 && !strings.Contains(rest[0], "=") {
			if !e2bserver.ValidTeam(rest[0]) {
				return nil, bad("team name %q: use letters, digits, '.', '_', '-'", rest[0])
			}
			k.Team, rest = rest[0], rest[1:]
		}
		if len(rest) > 0 {
			q := &e2bserver.Quota{}
			for _, kv := range rest {
				name, val, _ := strings.Cut(kv, "=")
				var err error
				switch name {
				case "sandboxes":
					q.Sandboxes, err = strconv.Atoi(val)
				case "creates-per-minute":
					q.CreatesPerMinute, err = strconv.Atoi(val)
				case "memory":
					q.Memory, err = parseSize(val)
				case "total-memory":
					q.TotalMemory, err = parseSize(val)
				case "cpu":
					q.CPU, err = parseCPUQuota(val)
				case "total-cpu":
					q.TotalCPU, err = parseCPUQuota(val)
				default:
					return nil, bad("unknown field %q; quotas are sandboxes, memory, cpu, total-memory, total-cpu, creates-per-minute", kv)
				}
				if err != nil {
					return nil, bad("%s: %v", kv, err)
				}
			}
			if k.Team == "" {
				return nil, bad("a quota needs a team name before it")
			}
			k.Quota = q
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--api-key-file %s holds no key", path)
	}
	return keys, nil
}
