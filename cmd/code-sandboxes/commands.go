package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/code-sandboxes/code-sandboxes/environments"
	"github.com/code-sandboxes/code-sandboxes/local"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	units "github.com/docker/go-units"
	"github.com/spf13/cobra"
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

func execCmd() *cobra.Command {
	var c common
	var file, figures string
	var quiet, jsonOut bool
	cmd := &cobra.Command{
		Use:   "exec [CODE]",
		Short: "Run code in a new sandbox and print its output (exit status 0 on success, 1 otherwise)",
		Example: `  code-sandboxes exec 'import sys; print(sys.version)'
  code-sandboxes exec -f script.py
  echo '1 + 1' | code-sandboxes exec
  code-sandboxes exec --language javascript 'console.log(6 * 7)'
  code-sandboxes exec --network all --package requests 'import requests'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := readCode(cmd, args, file)
			if err != nil {
				return err
			}
			lang, err := checkLanguage(c.language)
			if err != nil {
				return err
			}
			sb, done, err := c.open(cmd, time.Hour, 0)
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			var opts []sandboxes.RunOption
			if lang != "" {
				opts = append(opts, sandboxes.WithLanguage(lang))
			}
			if !jsonOut {
				// With --json stdout carries the JSON document alone; the
				// output is in it.
				opts = append(opts,
					sandboxes.OnStdout(func(m sandboxes.OutputMessage) { fmt.Fprint(out, m.Line) }),
					sandboxes.OnStderr(func(m sandboxes.OutputMessage) { fmt.Fprint(cmd.ErrOrStderr(), m.Line) }))
			}
			ex, err := sb.RunCode(ctx, code, opts...)
			if err != nil {
				return err
			}
			if jsonOut {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				_ = enc.Encode(ex)
			} else {
				printResults(cmd, ex, figures, quiet)
			}
			if !ex.Success() {
				return exitError{1}
			}
			return nil
		},
	}
	c.flags(cmd, true)
	c.existingFlag(cmd)
	c.languageFlag(cmd)
	cmd.Flags().Lookup("lifetime").Usage = "sandbox lifetime, e.g. 10m (default 1h; the sandbox ends when exec finishes)"
	cmd.Flags().StringVarP(&file, "file", "f", "", "read the code from a file ('-' = stdin)")
	cmd.Flags().StringVar(&figures, "figures-dir", ".", "where to save figures (PNG, JPEG, SVG) the code produces")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the code's own output")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the whole execution as JSON")
	return cmd
}

func readCode(cmd *cobra.Command, args []string, file string) (string, error) {
	switch {
	case len(args) == 1 && file != "":
		return "", fmt.Errorf("give the code as an argument or with -f, not both")
	case len(args) == 1:
		return args[0], nil
	case file != "" && file != "-":
		b, err := os.ReadFile(file)
		return string(b), err
	}
	if f, ok := cmd.InOrStdin().(*os.File); ok && file == "" {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return "", fmt.Errorf("no code given: pass it as an argument, with -f FILE, or on stdin")
		}
	}
	b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 16<<20))
	return string(b), err
}

var figureExt = map[string]string{sandboxes.MIMEPNG: "png", sandboxes.MIMEJPEG: "jpg", sandboxes.MIMESVG: "svg"}

func printResults(cmd *cobra.Command, ex *sandboxes.Execution, figures string, quiet bool) {
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	n := 0
	for _, r := range ex.Results {
		saved := false
		for mime, ext := range figureExt {
			if _, ok := r.Data[mime]; !ok {
				continue
			}
			var data []byte
			if mime == sandboxes.MIMESVG {
				s, _ := r.Data[mime].(string)
				data = []byte(s)
			} else if mime == sandboxes.MIMEPNG {
				data = r.PNG()
			} else {
				data = r.JPEG()
			}
			if len(data) == 0 {
				continue
			}
			n++
			p := filepath.Join(figures, fmt.Sprintf("figure-%d-%d.%s", ex.ExecutionCount, n, ext))
			if err := os.WriteFile(p, data, 0o644); err != nil {
				fmt.Fprintln(errw, "could not save figure:", err)
				continue
			}
			fmt.Fprintln(out, "figure saved:", p)
			saved = true
			break
		}
		if !saved && !quiet && r.Text() != "" {
			fmt.Fprintln(out, r.Text())
		}
	}
	if ex.Error != nil {
		if ex.Error.Traceback != "" {
			fmt.Fprintln(errw, ex.Error.Traceback)
		} else {
			fmt.Fprintf(errw, "%s: %s\n", ex.Error.Name, ex.Error.Value)
		}
	}
	if ex.Truncated {
		fmt.Fprintln(errw, "(output truncated)")
	}
}

func replCmd() *cobra.Command {
	var c common
	var figures string
	cmd := &cobra.Command{
		Use:   "repl",
		Short: "An interactive session in one sandbox (:exit to leave; the sandbox ends with the session unless --sandbox named it)",
		RunE: func(cmd *cobra.Command, args []string) error {
			lang, err := checkLanguage(c.language)
			if err != nil {
				return err
			}
			sb, done, err := c.open(cmd, 24*time.Hour, sandboxes.NoIdleTimeout)
			if err != nil {
				return err
			}
			defer done()
			return runREPL(cmd, sb, lang, figures)
		},
	}
	c.flags(cmd, true)
	c.existingFlag(cmd)
	c.languageFlag(cmd)
	cmd.Flags().Lookup("lifetime").Usage = "sandbox lifetime, e.g. 10m (default 24h; the sandbox ends with the session)"
	cmd.Flags().StringVar(&figures, "figures-dir", ".", "where to save figures")
	return cmd
}

// runREPL reads cells from stdin and runs them. Ctrl-C interrupts the
// running cell (KeyboardInterrupt) or, at the prompt, drops the block being
// typed; the session goes on. EOF, :exit, SIGTERM or SIGHUP end it.
func runREPL(cmd *cobra.Command, sb *sandboxes.Sandbox, lang, figures string) error {
	var langOpt []sandboxes.RunOption
	shown := "Python"
	if lang != "" {
		langOpt = append(langOpt, sandboxes.WithLanguage(lang))
		shown = lang
	}
	// main's context is cancelled by SIGINT; here Ctrl-C is for the cell,
	// so the session runs on a context of its own that SIGTERM ends.
	ctx, cancel := context.WithCancel(context.WithoutCancel(cmd.Context()))
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var busy atomic.Bool
	atPrompt := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-sigs:
				switch {
				case sig == syscall.SIGTERM || sig == syscall.SIGHUP:
					// Ended, or its terminal closed: end the session (and
					// the sandbox) rather than die and leave it running.
					cancel()
					return
				case busy.Load():
					ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
					_, _ = sb.Interrupt(ictx)
					icancel()
				default:
					select {
					case atPrompt <- struct{}{}:
					default:
					}
				}
			}
		}
	}()

	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		in := bufio.NewScanner(cmd.InOrStdin())
		in.Buffer(make([]byte, 64<<10), 16<<20)
		for in.Scan() {
			select {
			case lines <- in.Text():
			case <-ctx.Done():
				return
			}
		}
		readErr <- in.Err()
	}()

	out := cmd.OutOrStdout()
	prompt := fmt.Sprintf("sandbox(%s:%s)>>> ", sb.Variant(), sb.Name())
	if lang != "" && lang != "python" {
		prompt = fmt.Sprintf("sandbox(%s:%s %s)>>> ", sb.Variant(), sb.Name(), lang)
	}
	fmt.Fprintln(out, "Type code; end a block with an empty line. :exit leaves, :help helps, Ctrl-C interrupts.")
	var block []string
	fmt.Fprint(out, prompt)
	for {
		var line string
		select {
		case <-ctx.Done():
			fmt.Fprintln(out)
			return nil
		case err := <-readErr:
			fmt.Fprintln(out)
			return err
		case <-atPrompt:
			// The terminal dropped the line being typed; drop the block too.
			block = nil
			fmt.Fprint(out, "\nKeyboardInterrupt\n"+prompt)
			continue
		case line = <-lines:
		}
		if len(block) == 0 {
			switch strings.TrimSpace(line) {
			case ":exit", ":quit", "exit", "quit":
				return nil
			case ":help":
				fmt.Fprintf(out, "Enter %s code. A line ending in ':', '{', '(', '[' or '\\' starts a block that ends with an empty line. Ctrl-C interrupts the running code. :exit leaves.\n", shown)
				fmt.Fprint(out, prompt)
				continue
			case "":
				fmt.Fprint(out, prompt)
				continue
			}
		}
		block = append(block, line)
		trimmed := strings.TrimRight(line, " \t")
		// A block opens on a line that can't end a statement: Python's
		// ':' and a continuation; brackets for the languages with braces.
		open := strings.HasSuffix(trimmed, ":") || strings.HasSuffix(trimmed, "\\") || strings.HasSuffix(trimmed, "{") ||
			strings.HasSuffix(trimmed, "(") || strings.HasSuffix(trimmed, "[") || len(block) > 1
		if open && !(len(block) > 1 && strings.TrimSpace(line) == "") {
			fmt.Fprint(out, "... ")
			continue
		}
		code := strings.Join(block, "\n")
		block = nil
		busy.Store(true)
		ex, err := sb.RunCode(ctx, code, append(langOpt,
			sandboxes.OnStdout(func(m sandboxes.OutputMessage) { fmt.Fprint(out, m.Line) }),
			sandboxes.OnStderr(func(m sandboxes.OutputMessage) { fmt.Fprint(cmd.ErrOrStderr(), m.Line) }))...)
		busy.Store(false)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		printResults(cmd, ex, figures, false)
		if ex.Interrupted && ex.Error == nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "KeyboardInterrupt")
		}
		if ex.ExitCode != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "(exit code %d)\n", *ex.ExitCode)
		}
		fmt.Fprint(out, prompt)
	}
}

func createCmd() *cobra.Command {
	var c common
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox that keeps running (until its lifetime ends or it is deleted) and print its id",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			lang, err := checkLanguage(c.language)
			if err != nil {
				return err
			}
			// A sandbox made with create is meant to stay until its lifetime
			// ends or it is deleted, however long it sits unused.
			if cfg.IdleTimeout == 0 {
				cfg.IdleTimeout = sandboxes.NoIdleTimeout
			}
			sb, err := sandboxes.Create(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if lang != "" {
				// Start the language's kernel now: a sandbox that can't run
				// it is refused (and ended) here, not at the first exec.
				ex, err := sb.RunCode(cmd.Context(), "", sandboxes.WithLanguage(lang))
				if err == nil && ex.Error != nil {
					err = fmt.Errorf("%s: %s", ex.Error.Name, ex.Error.Value)
				}
				if err != nil {
					_ = sb.Close()
					return fmt.Errorf("--language %s: %w (the sandbox was removed)", lang, err)
				}
			}
			defer sb.Detach()
			if jsonOut {
				info, err := sb.Info(cmd.Context())
				if err != nil {
					return err
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(info)
			}
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID())
			return nil
		},
	}
	c.flags(cmd, true)
	c.languageFlag(cmd)
	cmd.Flags().Lookup("language").Usage = "start this language's kernel (" + strings.Join(languages, ", ") + ") in the new sandbox, refusing a sandbox that can't run it; exec --sandbox then runs it with --language"
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the sandbox's info as JSON")
	return cmd
}

func printTable(cmd *cobra.Command, infos []sandboxes.Info) {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tVARIANT\tNAME\tSTATUS\tENDS\tTAGS")
	for _, i := range infos {
		keys := make([]string, 0, len(i.Tags))
		for k := range i.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tags := make([]string, 0, len(keys))
		for _, k := range keys {
			tags = append(tags, k+"="+i.Tags[k])
		}
		ends := "-"
		if !i.EndAt.IsZero() {
			ends = time.Until(i.EndAt).Round(time.Second).String()
		}
		name := i.Name
		if name == "" {
			name = "-" // a sandbox another tool made (list --all)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", i.ID, i.Variant, name, i.Status, ends, strings.Join(tags, ","))
	}
	tw.Flush()
}

// e2bListAll is the e2b variant's options that list every sandbox of the
// team (e2boptions.go); nil in a localonly build, which has no e2b.
var e2bListAll func() any

func listCmd() *cobra.Command {
	var c common
	var jsonOut, all bool
	var name string
	var tags []string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List running sandboxes",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			t, err := parseKV(tags, "tag")
			if err != nil {
				return err
			}
			if all {
				// Only E2B has sandboxes another tool made in the same
				// account; elsewhere every sandbox listed is already ours.
				if sandboxes.NormalizeVariant(c.variant) != "e2b" || e2bListAll == nil {
					return fmt.Errorf("--all applies to -v e2b (every sandbox of the E2B team, whoever made it); -v %s lists every sandbox code-sandboxes made there already", c.variant)
				}
				cfg.Options = e2bListAll()
			}
			infos, err := sandboxes.List(cmd.Context(), cfg, sandboxes.ListOptions{Name: name, Tags: t})
			if err != nil {
				return err
			}
			if jsonOut {
				if infos == nil {
					infos = []sandboxes.Info{}
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(infos)
			}
			printTable(cmd, infos)
			return nil
		},
	}
	c.flags(cmd, false)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	cmd.Flags().StringVar(&name, "name", "", "only sandboxes with this name")
	cmd.Flags().StringArrayVar(&tags, "tag", nil, "only sandboxes with this tag key=value (repeatable)")
	cmd.Flags().BoolVar(&all, "all", false, "with -v e2b: also the team's sandboxes that other tools (E2B's SDKs, the dashboard) made; their metadata shows as tags")
	return cmd
}

func getCmd() *cobra.Command {
	var c common
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "get ID|NAME",
		Short: "Show one sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			sb, err := sandboxes.Get(cmd.Context(), cfg, args[0])
			if err != nil {
				return err
			}
			defer sb.Detach()
			info, err := sb.Info(cmd.Context())
			if err != nil {
				return err
			}
			if jsonOut {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(info)
			}
			printTable(cmd, []sandboxes.Info{info})
			return nil
		},
	}
	c.flags(cmd, false)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func sweepCmd() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Remove what dead sandboxes left behind (list never cleans up; create and delete sweep as they go)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			n, err := sandboxes.Sweep(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %d dead sandboxes\n", n)
			return nil
		},
	}
	c.flags(cmd, false)
	return cmd
}

func deleteCmd() *cobra.Command {
	var c common
	var yes bool
	var tags []string
	cmd := &cobra.Command{
		Use:   "delete [ID|NAME]",
		Short: "Kill sandboxes by id, name or tags",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			t, err := parseKV(tags, "tag")
			if err != nil {
				return err
			}
			target := ""
			if len(args) == 1 {
				target = args[0]
			}
			if target == "" && len(t) == 0 {
				return fmt.Errorf("name a sandbox (id or name) or give --tag key=value")
			}
			if !yes {
				what := target
				if what == "" {
					what = "every sandbox tagged " + strings.Join(tags, ",")
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Delete %s? [y/N] ", what)
				ans, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(ans)); a != "y" && a != "yes" {
					fmt.Fprintln(cmd.OutOrStdout(), "Nothing deleted.")
					return exitError{1}
				}
			}
			killed, err := sandboxes.Kill(cmd.Context(), cfg, target, sandboxes.ListOptions{Tags: t})
			for _, id := range killed {
				fmt.Fprintln(cmd.OutOrStdout(), "deleted", id)
			}
			if err != nil {
				return err
			}
			if len(killed) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no sandbox matched")
				return exitError{1}
			}
			return nil
		},
	}
	c.flags(cmd, false)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().StringArrayVar(&tags, "tag", nil, "kill every sandbox with this tag key=value (repeatable)")
	return cmd
}

func environmentsCmd() *cobra.Command {
	var variant, dir, outForm string
	cmd := &cobra.Command{
		Use:   "environments",
		Short: "List built environments and the environments of each variant; build and remove them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return printEnvironments(cmd, variant, dir, outForm)
		},
	}
	cmd.Flags().StringVarP(&outForm, "output", "o", "table", "table (fits the terminal: $COLUMNS or 80), wide (every column whole) or json")
	cmd.Flags().StringVarP(&variant, "variant", "v", "", "only this variant")
	cmd.PersistentFlags().StringVar(&dir, "dir", "", "environment store (default $CODE_SANDBOXES_ENV_DIR, /var/lib/code-sandboxes/environments as root, else ~/.local/share/code-sandboxes/environments)")

	var file, buildVariant string
	var force bool
	build := &cobra.Command{
		Use:   "build -f spec.yaml | build python",
		Short: "Build an environment from a spec file, or a built-in one (cached by build id)",
		Long: `Build an environment: a root filesystem from a YAML spec.

  name: geo                      # DNS label
  description: GIS tools
  base:
    debian: bookworm             # or image: registry/repo:tag, tarball: img.tar, host: true
    mirror: http://deb.example.org/debian   # default: this machine's apt mirror
  apt: [python3, python3-pip, python3-shapely]
  pip:
    lock: requirements.lock      # name==version --hash=sha256:… on every line
    index: https://pypi.example.org/simple
  files:
    - {path: /etc/geo.conf, content: "x=1\n", mode: "0644"}
  env: {GEO_HOME: /opt/geo}

The build id is the SHA-256 of the spec and every input it names; the name
points at the newest build, and sandboxes pin the id.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt := environments.Options{Dir: dir, Progress: cmd.ErrOrStderr(), Force: force}
			if v := sandboxes.NormalizeVariant(buildVariant); v != "" && v != "local" {
				if file == "" {
					return fmt.Errorf("-v %s builds from a spec file: give -f spec.yaml", v)
				}
				// On the variant's own host (e2b: an E2B template in the
				// team of $E2B_API_KEY).
				opt.Config = &sandboxes.Config{Variant: v}
			}
			var b *environments.Build
			var err error
			switch {
			case file != "" && len(args) == 0:
				b, err = environments.BuildFile(cmd.Context(), file, opt)
			case file == "" && len(args) == 1:
				b, err = environments.BuildBuiltin(cmd.Context(), args[0], opt)
			default:
				return fmt.Errorf("give either a spec file (-f spec.yaml) or the name of a built-in environment (python)")
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", b.Name, b.ID)
			return nil
		},
	}
	build.Flags().StringVarP(&file, "file", "f", "", "spec file (YAML)")
	build.Flags().BoolVar(&force, "force", false, "rebuild even if this build id exists")
	build.Flags().StringVarP(&buildVariant, "variant", "v", "", "build on this variant's host instead of locally: e2b builds an E2B template in $E2B_API_KEY's team (prints name:tag, which pins the build, and E2B's build id)")
	rm := &cobra.Command{
		Use:   "rm NAME|BUILD-ID...",
		Short: "Remove built environments",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, ref := range args {
				b, err := environments.Remove(dir, ref)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s %s\n", b.Name, b.ID)
			}
			return nil
		},
	}
	var output, agentBin string
	var noAgent bool
	export := &cobra.Command{
		Use:   "export NAME|BUILD-ID -o image.tar",
		Short: "Write an environment as an image tarball (docker load, ctr images import, kind load)",
		Long: `Write a built environment as a ` + "`docker save`" + ` tarball tagged
code-sandboxes-env:<build id>, with the agent at ` + environment.AgentPath + ` (for the
kubernetes variant, whose pods can't bind-mount it). The agent is this program
unless --agent names another static build of code-sandboxes or
code-sandboxes-agent.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output == "" {
				return fmt.Errorf("give the output file with -o image.tar")
			}
			st, err := environment.Open(dir)
			if err != nil {
				return err
			}
			b, err := st.Resolve(args[0])
			if err != nil {
				return err
			}
			var extra []environment.ExtraFile
			if !noAgent {
				if agentBin == "" {
					if agentBin, err = os.Executable(); err != nil {
						return err
					}
				}
				extra = append(extra, environment.ExtraFile{Path: environment.AgentPath, HostPath: agentBin, Mode: 0o755})
			}
			f, err := os.Create(output)
			if err != nil {
				return err
			}
			tag := environment.ImageTag(b)
			if err := environment.WriteImageTar(cmd.Context(), b, tag, extra, f); err != nil {
				f.Close()
				os.Remove(output)
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", tag, output)
			return nil
		},
	}
	export.Flags().StringVarP(&output, "output", "o", "", "image tarball to write")
	export.Flags().StringVar(&agentBin, "agent", "", "static agent binary to include (default: this program)")
	export.Flags().BoolVar(&noAgent, "no-agent", false, "leave the agent out")
	cmd.AddCommand(build, rm, export)
	return cmd
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
