package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	units "github.com/docker/go-units"
	"github.com/spf13/cobra"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

type common struct {
	variant     string
	name        string
	environment string
	tags        []string
	timeout     time.Duration
	lifetime    time.Duration
	idle        time.Duration
	memory      string
	pids        string
	cpu         float64
	network     string
	allow       []string
	deny        []string
	allowPriv   bool
	env         []string
	runtimeDir  string
	sandbox     string // exec/repl --sandbox: an existing sandbox
	isolation   string
	language    string // exec, create, repl: the kernel the code runs in
	packages    []string
	pkgIndex    string
	volumes     []string // --volume NAME:/path (volumes.go)
}

// creationFlags are the flags that only mean something when a sandbox is
// created; with --sandbox they are refused, not silently ignored.
var creationFlags = []string{"name", "environment", "tag", "lifetime", "idle-timeout", "memory", "pids", "cpu", "network", "allow", "deny", "allow-private", "env", "isolation", "package", "package-index", "volume"}

// existingFlag adds --sandbox to a command that can run in an existing
// sandbox instead of creating one.
func (c *common) existingFlag(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.sandbox, "sandbox", "", "run in this existing sandbox (id or name) instead of creating one; it keeps running afterwards")
}

// open creates the sandbox the flags describe, or with --sandbox connects
// to an existing one. done ends it: Close for a sandbox made here, Detach
// for an existing one (which goes on running).
func (c *common) open(cmd *cobra.Command, defaultLifetime, defaultIdle time.Duration) (sb *sandboxes.Sandbox, done func(), err error) {
	cfg, err := c.config()
	if err != nil {
		return nil, nil, err
	}
	ctx := cmd.Context()
	if c.sandbox != "" {
		for _, f := range creationFlags {
			if cmd.Flags().Changed(f) {
				return nil, nil, fmt.Errorf("--%s applies only when creating a sandbox; --sandbox %s runs in an existing one", f, c.sandbox)
			}
		}
		sb, err = sandboxes.Get(ctx, cfg, c.sandbox)
		if err != nil {
			return nil, nil, err
		}
		return sb, func() { _ = sb.Detach() }, nil
	}
	if ownsLifetimes(cfg.Variant) {
		if cfg.MaxLifetime == 0 {
			cfg.MaxLifetime = defaultLifetime
		}
		if cfg.IdleTimeout == 0 {
			cfg.IdleTimeout = defaultIdle
		}
	}
	sb, err = sandboxes.Create(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return sb, func() { _ = sb.Close() }, nil
}

func (c *common) flags(cmd *cobra.Command, creating bool) {
	f := cmd.Flags()
	f.StringVarP(&c.variant, "variant", "v", "local", "sandbox variant: "+strings.Join(sandboxes.Variants(), ", "))
	f.StringVar(&c.runtimeDir, "runtime-dir", "", "local variant: where sandbox records live (default $CODE_SANDBOXES_RUNTIME_DIR, /run/code-sandboxes or $XDG_RUNTIME_DIR)")
	if !creating {
		return
	}
	f.StringVar(&c.name, "name", "", "sandbox name (generated when empty)")
	f.StringVar(&c.environment, "environment", "", "environment (sandbox image) name")
	f.StringArrayVar(&c.tags, "tag", nil, "tag as key=value (repeatable)")
	f.DurationVar(&c.timeout, "timeout", 0, "per-execution timeout, e.g. 60s (0 = none)")
	f.DurationVar(&c.lifetime, "lifetime", 0, "sandbox lifetime, e.g. 10m (default 24h)")
	f.DurationVar(&c.idle, "idle-timeout", 0, "end the sandbox after this long unused, e.g. 15m (default: none for create and repl, whose sandboxes are meant to stay)")
	f.StringVar(&c.memory, "memory", "", "memory limit, e.g. 512M, 2Gi (default 1G on local, docker and kubernetes; unlimited for none)")
	f.StringVar(&c.pids, "pids", "", "process limit (default 1024 on local and docker; unlimited for none)")
	f.Float64Var(&c.cpu, "cpu", 0, "CPU limit in cores")
	f.StringVar(&c.network, "network", "", "network policy: none (the default), all (the internet, never the host) or allowlist (only --allow hosts)")
	f.StringArrayVar(&c.allow, "allow", nil, "with --network allowlist: a host name, *.domain, IP or CIDR the sandbox may reach (repeatable)")
	f.StringArrayVar(&c.deny, "deny", nil, "with --network all: an IP or CIDR the sandbox may not reach (repeatable; 0.0.0.0/0 denies everything); --allow then lists the exceptions (allowed wins, as E2B's allowOut over denyOut)")
	f.BoolVar(&c.allowPriv, "allow-private", false, "with --network all or allowlist: also reach the private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7)")
	f.StringArrayVar(&c.env, "env", nil, "environment variable as KEY=VALUE (repeatable)")
	f.StringArrayVar(&c.packages, "package", nil, "pip-install this requirement (name or name==1.2) in the sandbox before the code runs (repeatable; needs --network all or an allowlist that reaches the index)")
	f.StringVar(&c.pkgIndex, "package-index", "", "with --package: the index URL pip installs from (default: pip's own configuration)")
	f.StringArrayVar(&c.volumes, "volume", nil, "mount a volume read-write as NAME:/path (a volume from `code-sandboxes volumes create`) or /host/dir:/path (repeatable; local and docker)")
	f.StringVar(&c.isolation, "isolation", "", "isolation level: namespaces (the default) or gvisor (gVisor's user-space kernel between the code and the host's: local as root with runsc installed, docker with the engine's runsc runtime, kubernetes through a RuntimeClass)")
}

func parseKV(list []string, what string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: use key=value", what, kv)
		}
		m[k] = v
	}
	return m, nil
}

// parseSize reads a memory size as people write it: 512M, 512Mi, 2G, 1.5GiB
// (binary units, docker's reading); anything else is refused.
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if strings.EqualFold(strings.TrimSpace(s), "unlimited") {
		return sandboxes.Unlimited, nil
	}
	t := strings.TrimSpace(s)
	if strings.HasSuffix(t, "i") || strings.HasSuffix(t, "I") {
		t += "B" // Kubernetes' spelling, 512Mi: the same binary unit
	}
	n, err := units.RAMInBytes(t)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: use a positive number with an optional K, M, G or T suffix (binary units), e.g. 512M or 2Gi, or unlimited", s)
	}
	return n, nil
}

// isLocal says whether variant names the local variant (the default).
func isLocal(variant string) bool {
	v := sandboxes.NormalizeVariant(variant)
	return v == "" || v == "local"
}

func (c *common) config() (sandboxes.Config, error) {
	cfg := sandboxes.Config{Variant: c.variant, Name: c.name, Environment: c.environment, Timeout: c.timeout,
		MaxLifetime: c.lifetime, IdleTimeout: c.idle, CPU: c.cpu, NetworkPolicy: c.network, AllowedHosts: c.allow, DeniedHosts: c.deny, AllowPrivate: c.allowPriv, Isolation: sandboxes.Isolation(c.isolation),
		Packages: c.packages, PackageIndex: c.pkgIndex}
	if isLocal(c.variant) {
		cfg.Options = local.Options{RuntimeDir: c.runtimeDir}
	}
	var err error
	if c.pkgIndex != "" && len(c.packages) == 0 {
		return cfg, fmt.Errorf("--package-index applies only with --package")
	}
	if cfg.Tags, err = parseKV(c.tags, "tag"); err != nil {
		return cfg, err
	}
	if cfg.Env, err = parseKV(c.env, "env"); err != nil {
		return cfg, err
	}
	if cfg.Memory, err = parseSize(c.memory); err != nil {
		return cfg, err
	}
	if cfg.Volumes, err = parseVolumes(c.volumes); err != nil {
		return cfg, err
	}
	switch p := strings.TrimSpace(c.pids); {
	case p == "":
	case strings.EqualFold(p, "unlimited"):
		cfg.Pids = sandboxes.Unlimited
	default:
		if cfg.Pids, err = strconv.ParseInt(p, 10, 64); err != nil || cfg.Pids <= 0 {
			return cfg, fmt.Errorf("--pids %q: give a number of processes or unlimited", c.pids)
		}
	}
	return cfg, nil
}

// serverCommands are serve, interpret and mcp: left out of a -tags
// localonly build (make run's), which then compiles neither the servers nor
// the model SDKs.
var serverCommands []func() *cobra.Command

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "code-sandboxes",
		Short:         "Run untrusted code in isolated sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(execCmd(), replCmd(), createCmd(), listCmd(), getCmd(), deleteCmd(), sweepCmd(), environmentsCmd(), volumesCmd(), versionCmd())
	root.AddCommand(shellCmd())
	for _, c := range append(pauseCommands, serverCommands...) {
		root.AddCommand(c())
	}
	return root
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "code-sandboxes", version)
		},
	}
}

// ownsLifetimes says whether the CLI's default lifetimes apply: the jupyter
// variant runs kernels on a server whose lifetime it doesn't own, and
// refuses any.
func ownsLifetimes(variant string) bool { return variant != "jupyter" }
