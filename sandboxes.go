// Package sandboxes runs untrusted code — most often code an LLM just wrote —
// in isolated sandboxes behind one API over many backends ("variants"). A
// sandbox keeps state between RunCode calls, returns rich output keyed by MIME
// type, and has files, processes, a network policy, limits and a lifetime.
//
//	sb, err := sandboxes.Create(ctx, sandboxes.Config{})   // the local variant
//	defer sb.Close()
//	sb.RunCode(ctx, "x = 40")
//	ex, _ := sb.RunCode(ctx, "x + 2")
//	ex.Text() // "42"
//
// Programs that use the local variant re-execute their own binary as the
// sandbox's agent; that happens in this package's init, before main runs.
package sandboxes

import (
	"context"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Errors, matchable with errors.Is.
var (
	// ErrNotSupported: the variant lacks the operation. Never a silent no-op.
	ErrNotSupported = sberr.ErrNotSupported
	// ErrNotFound: no such sandbox, context, file, variable or process.
	ErrNotFound = sberr.ErrNotFound
	// ErrTimeout: a wait ran out.
	ErrTimeout = sberr.ErrTimeout
	// ErrInvalidConfig: the Config can't be honoured; the message says why.
	ErrInvalidConfig = sberr.ErrInvalidConfig
	// ErrClosed: the sandbox was closed by this process.
	ErrClosed = sberr.ErrClosed
	// ErrUnauthorized: the credentials were refused.
	ErrUnauthorized = sberr.ErrUnauthorized
	// ErrUnavailable: the sandbox stopped answering (killed, expired, crashed).
	ErrUnavailable = sberr.ErrUnavailable
	// ErrNoRoom (also an ErrUnavailable): the host has no room for another
	// sandbox now: no process ids or memory left under kernel.pid_max,
	// kernel.threads-max, the host's memory, or the creator's cgroup's
	// pids.max or memory limit; the message names the limit and how to
	// raise it. Retrying once others have closed can work.
	ErrNoRoom = sberr.ErrNoRoom
	// ErrInvalidInput: a request argument was refused.
	ErrInvalidInput = sberr.ErrInvalidInput
	// ErrPermission: the sandbox's user may not do that to that path (a
	// read-only mount, another owner's file).
	ErrPermission = sberr.ErrPermission
)

// DefaultIdleTimeout is Config.IdleTimeout's default: long enough for a
// person between two cells, short enough that a crashed program's
// sandboxes end within minutes (E2B's default lifetime is 5 minutes).
const DefaultIdleTimeout = 15 * time.Minute

// NoIdleTimeout, as Config.IdleTimeout, keeps an idle sandbox running
// until its MaxLifetime (what `code-sandboxes create` and serve use).
const NoIdleTimeout time.Duration = -1

// Network policies.
const (
	NetworkNone      = "none"
	NetworkAll       = "all"
	NetworkAllowlist = "allowlist"
)

// Isolation is how strongly a sandbox is kept from the host's kernel.
type Isolation string

// Isolation levels.
const (
	// IsolationNamespaces (the default): Linux namespaces, cgroups and a
	// seccomp filter; the sandbox's code talks to the host's kernel.
	IsolationNamespaces Isolation = "namespaces"
	// IsolationGVisor runs the sandbox under gVisor (runsc): a user-space
	// kernel between its code and the host's, so that a kernel exploit
	// lands in gVisor's Sentry rather than on the host. Local (as root,
	// with runsc installed) and docker (an engine with the runsc runtime)
	// offer it; kubernetes maps it to a RuntimeClass.
	IsolationGVisor Isolation = "gvisor"
)

// Unlimited, as Config.Memory or Config.Pids, asks for no limit at all.
const Unlimited = driver.Unlimited

// DefaultMemory is the memory limit (1 GiB) of a sandbox created with
// Memory 0 on the local, docker and kubernetes variants, CLI and serve
// included. It bounds the RAM-backed tmpfs mounts too.
const DefaultMemory = driver.DefaultMemoryBytes

// Config describes a sandbox. The zero value is a local sandbox with no
// network, the host's python3, 1 GiB of memory, a one-day lifetime and a
// 15-minute idle timeout.
type Config struct {
	// Variant picks the backend: "local" (default), and others as registered.
	Variant string
	// Name is a human-friendly name; generated when empty.
	Name string
	// Tags label the sandbox for List and Kill.
	Tags map[string]string
	// Environment names the sandbox image; "" = the variant's default.
	Environment string
	// Timeout is the default per-execution timeout of RunCode (0 = none).
	Timeout time.Duration
	// MaxLifetime: the sandbox ends itself this long after creation (or after
	// the last SetTimeout). Default 24h (1h on e2b: E2B's hobby tier caps
	// sandboxes there).
	MaxLifetime time.Duration
	// AutoPause: when MaxLifetime ends (or the last SetTimeout's end), the
	// sandbox is paused (Sandbox.Pause) instead of killed: its whole state
	// stays on disk, Info says paused, and Resume brings it back with a
	// whole MaxLifetime again (E2B's autoPause, lifecycle onTimeout
	// "pause"). If the pause fails the sandbox is killed, as without
	// AutoPause. The idle timeout still kills. Local variant with isolation
	// gvisor and network none only; refused with ErrNotSupported and the
	// reason elsewhere.
	AutoPause bool
	// IdleTimeout: the sandbox ends itself after this long unused, so a
	// program that dies without Close leaves nothing running for long.
	// Use is any call in progress (an execution, a command's stream, file
	// transfers, a connection through Host) and restarts the clock when it
	// ends; a background process alone is not use. 0 = DefaultIdleTimeout;
	// NoIdleTimeout keeps an idle sandbox until MaxLifetime. Variants that
	// run our agent (local, docker, kubernetes) honour it; on e2b the
	// lifetime is E2B's own timeout (MaxLifetime) and setting it is refused.
	IdleTimeout time.Duration
	// Memory limit in bytes: 0 = DefaultMemory on local, docker and
	// kubernetes (the template's on e2b), Unlimited = none. CPU limit in
	// cores (0 = none). Pids limit: 0 = the variant's default (1024 on local
	// and docker), Unlimited = none.
	//
	// A limit that cannot be enforced (local, as a user without a writable
	// cgroup) fails Create, defaults included: never a silently weaker
	// sandbox. Ask for Unlimited explicitly to run without.
	Memory int64
	CPU    float64
	Pids   int64
	// Env is set for every process and kernel in the sandbox.
	Env map[string]string
	// WorkingDir is the default cwd of code and commands (default /home/user).
	WorkingDir string
	// NetworkPolicy: "none" (default on local), "all", or "allowlist" with
	// AllowedHosts. A variant that can't enforce a policy refuses it.
	NetworkPolicy string
	AllowedHosts  []string
	// DeniedHosts (NetworkPolicy all; IPs and CIDRs, no names) are refused
	// unless AllowedHosts lists them: with DeniedHosts, AllowedHosts are the
	// exceptions, as E2B's denyOut and allowOut (allowed wins). Denying
	// "0.0.0.0/0" or "::/0" denies all traffic: only AllowedHosts (if any)
	// stay reachable. Local and docker honour it; the others refuse it.
	DeniedHosts []string
	// AllowPrivate lets network all and allowlist reach the private ranges
	// (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7), refused by
	// default. The host's own addresses, loopback and link-local (cloud
	// metadata) stay unreachable regardless.
	AllowPrivate bool
	// Isolation is the isolation level: IsolationNamespaces ("", the
	// default) or IsolationGVisor. A variant that can't give the level
	// refuses it with ErrNotSupported and the reason (never a silently
	// weaker sandbox).
	Isolation Isolation
	// Snapshot, when set, creates the sandbox from that snapshot
	// (Sandbox.Snapshot): a fork with the snapshot's whole state, its own
	// id and token. The snapshot fixes everything but Name, Tags and
	// Variant.
	Snapshot string
	// Packages are pip-installed at creation (gllm_tools' additional_packages)
	// from PackageIndex (default: pip's own configuration).
	Packages     []string
	PackageIndex string
	// EnvironmentDir is the store of built environments; default
	// $CODE_SANDBOXES_ENV_DIR, else /var/lib/code-sandboxes/environments
	// (root) or ~/.local/share/code-sandboxes/environments.
	EnvironmentDir string
	// BuildOutput receives progress when Create has to build an environment
	// first (the built-in "python" on first use); nil = os.Stderr.
	BuildOutput io.Writer

	// Volumes are mounted read-write into the sandbox, each at its Path
	// (CheckVolumePath): storage that outlives the sandbox, shared by the
	// sandboxes that mount it. Local (namespaces isolation), docker and
	// kubernetes; refused with ErrNotSupported elsewhere.
	Volumes []VolumeMount

	// Tools are granted to the sandbox at creation (see Tool and
	// Sandbox.RegisterTools): its code calls them with import tools.
	Tools []Tool

	// Options are the variant's settings, of the type its package
	// defines: local.Options, docker.Options, kubernetes.Options,
	// e2b.Options (import the package to add its variant). nil = the
	// variant's defaults.
	Options any
}

// Variants lists the registered variant names: those whose packages the
// program imports.
func Variants() []string { return driver.Names() }

// variantPackages are this module's variant packages, named in the error
// for a variant the program didn't import.
var variantPackages = map[string]string{
	"local":      "github.com/code-sandboxes/code-sandboxes/local",
	"docker":     "github.com/code-sandboxes/code-sandboxes/docker",
	"kubernetes": "github.com/code-sandboxes/code-sandboxes/kubernetes",
	"e2b":        "github.com/code-sandboxes/code-sandboxes/e2b",
}

// NormalizeVariant lower-cases and trims a variant name and maps '_' to '-',
// as the Python package does.
func NormalizeVariant(v string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(v)), "_", "-")
}

func variantFor(name string) (driver.Variant, error) {
	name = NormalizeVariant(name)
	if name == "" {
		name = "local"
	}
	v := driver.Lookup(name)
	if v == nil {
		hint := ""
		if _, ok := variantPackages[name]; ok {
			hint = fmt.Sprintf(" (import %q to add it)", variantPackages[name])
		}
		return nil, fmt.Errorf("%w: unknown sandbox variant %q%s; registered variants: %s", ErrInvalidConfig, name, hint, strings.Join(Variants(), ", "))
	}
	return v, nil
}

// nameRE: a name is usable as a Kubernetes label value, a file name and
// a CLI argument alike.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

var tagKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)

func (c Config) spec() (driver.Spec, error) {
	bad := func(format string, a ...any) (driver.Spec, error) {
		return driver.Spec{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...)
	}
	s := driver.Spec{
		Variant: NormalizeVariant(c.Variant), Name: c.Name, Tags: c.Tags, Environment: c.Environment,
		Lifetime: c.MaxLifetime, MemoryBytes: c.Memory, CPUs: c.CPU, Pids: c.Pids, Env: c.Env,
		WorkingDir: c.WorkingDir, Network: strings.ToLower(strings.TrimSpace(c.NetworkPolicy)),
		AllowedHosts: c.AllowedHosts, DeniedHosts: c.DeniedHosts, AllowPrivate: c.AllowPrivate, Packages: c.Packages, PackageIndex: c.PackageIndex,
		EnvironmentDir: c.EnvironmentDir, BuildOutput: c.BuildOutput, Options: c.Options, Snapshot: c.Snapshot,
		AutoPause: c.AutoPause,
	}
	if s.Variant == "" {
		s.Variant = "local"
	}
	if s.Lifetime == 0 {
		s.Lifetime = 24 * time.Hour
	}
	switch {
	case c.IdleTimeout == NoIdleTimeout:
		s.IdleTimeout = 0
	case c.IdleTimeout < 0:
		return bad("IdleTimeout must be positive, 0 (the default, %s) or NoIdleTimeout, got %s", DefaultIdleTimeout, c.IdleTimeout)
	case c.IdleTimeout == 0:
		s.IdleTimeout = DefaultIdleTimeout
	default:
		s.IdleTimeout = c.IdleTimeout
	}
	switch {
	case s.Lifetime < 0:
		return bad("MaxLifetime must be positive, got %s", c.MaxLifetime)
	case c.Timeout < 0:
		return bad("Timeout must be positive or zero, got %s", c.Timeout)
	case c.Memory < 0 && c.Memory != Unlimited:
		return bad("Memory must be a positive number of bytes, 0 (the default, %d MiB) or Unlimited (-1), got %d", DefaultMemory>>20, c.Memory)
	case c.Memory > 0 && c.Memory < 16<<20:
		return bad("Memory of %d bytes is too small to run python; give at least 16 MiB", c.Memory)
	case c.CPU < 0:
		return bad("CPU must be a positive number of cores, got %g", c.CPU)
	case c.Pids < 0 && c.Pids != Unlimited:
		return bad("Pids must be positive, 0 (the variant's default) or Unlimited (-1), got %d", c.Pids)
	case c.Pids > 0 && c.Pids < 8:
		return bad("Pids of %d is too few to run the agent and a kernel; give at least 8", c.Pids)
	}
	switch Isolation(strings.ToLower(strings.TrimSpace(string(c.Isolation)))) {
	case "", IsolationNamespaces:
	case IsolationGVisor:
		s.Isolation = string(IsolationGVisor)
	default:
		return bad("unknown Isolation %q; use namespaces or gvisor", c.Isolation)
	}
	if s.Network == "inherit" {
		s.Network = ""
	}
	if err := checkNetworkFields(Network{Policy: s.Network, AllowedHosts: c.AllowedHosts, DeniedHosts: c.DeniedHosts, AllowPrivate: c.AllowPrivate}, true); err != nil {
		return driver.Spec{}, err
	}
	for k := range c.Tags {
		if !tagKey.MatchString(k) {
			return bad("tag key %q: use letters, digits, '.', '_', '/', '-' (at most 63)", k)
		}
	}
	if c.Name != "" && !nameRE.MatchString(c.Name) {
		return bad("Name %q: use at most 63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit", c.Name)
	}
	if c.WorkingDir != "" && !strings.HasPrefix(c.WorkingDir, "/") {
		return bad("WorkingDir must be an absolute path inside the sandbox, got %q", c.WorkingDir)
	}
	for k := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return bad("environment variable name %q is invalid", k)
		}
	}
	if err := checkVolumes(c.Volumes); err != nil {
		return driver.Spec{}, err
	}
	for _, m := range c.Volumes {
		s.Volumes = append(s.Volumes, driver.Volume{Source: m.Source, Path: path.Clean(m.Path)})
	}
	if s.Name == "" {
		s.Name = generateName()
	}
	return s, nil
}

// variant validates cfg and finds its variant.
func (c Config) variant() (driver.Variant, driver.Spec, error) {
	spec, err := c.spec()
	if err != nil {
		return nil, spec, err
	}
	v, err := variantFor(spec.Variant)
	if err != nil {
		return v, spec, err
	}
	if d := v.Capabilities().DefaultLifetime; d > 0 && c.MaxLifetime == 0 {
		spec.Lifetime = d
	}
	if !v.Capabilities().IdleTimeout {
		if c.IdleTimeout > 0 {
			return nil, spec, fmt.Errorf("%w: IdleTimeout on the %s variant: its sandboxes end by MaxLifetime only; set MaxLifetime instead", ErrNotSupported, v.Name())
		}
		spec.IdleTimeout = 0
	}
	return v, spec, err
}

// Create starts a sandbox and returns when it answers.
func Create(ctx context.Context, cfg Config) (*Sandbox, error) {
	v, spec, err := cfg.variant()
	if err != nil {
		return nil, err
	}
	for _, t := range cfg.Tools {
		if _, err := prepareTool(t); err != nil {
			return nil, err
		}
	}
	if len(cfg.Tools) > 0 && v.Name() == "e2b" {
		return nil, fmt.Errorf("%w: Tools need a sandbox that runs our agent (local, docker, kubernetes, or E2B's SDKs through serve); E2B's own sandboxes can't call back to the host", ErrNotSupported)
	}
	if levels := v.Capabilities().Isolations; spec.Isolation != "" && !slices.Contains(levels, spec.Isolation) {
		has := "only its own default"
		if len(levels) > 0 {
			has = "the default and " + strings.Join(levels, ", ")
		}
		return nil, fmt.Errorf("%w: the %s variant has no isolation level %q (it has %s)", ErrNotSupported, spec.Variant, spec.Isolation, has)
	}
	if len(spec.Volumes) > 0 && !v.Capabilities().Volumes {
		return nil, fmt.Errorf("%w: the %s variant can't mount volumes; use local, docker or kubernetes", ErrNotSupported, v.Name())
	}
	if spec.AutoPause && v.Name() != "local" {
		return nil, fmt.Errorf("%w: AutoPause pauses the sandbox when its lifetime ends, and the %s variant can't pause: %s", ErrNotSupported, v.Name(), pauseRefusal(v.Name()))
	}
	inst, err := v.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	sb := newSandbox(v, inst, cfg, spec)
	if len(cfg.Tools) > 0 {
		if err := sb.RegisterTools(ctx, cfg.Tools...); err != nil {
			_ = sb.Close()
			return nil, err
		}
	}
	return sb, nil
}

// Get reconnects to a running sandbox by id or name.
func Get(ctx context.Context, cfg Config, idOrName string) (*Sandbox, error) {
	v, spec, err := cfg.variant()
	if err != nil {
		return nil, err
	}
	id, err := resolve(ctx, v, spec, idOrName)
	if err != nil {
		return nil, err
	}
	inst, err := v.Connect(ctx, id, spec)
	if err != nil {
		return nil, err
	}
	return newSandbox(v, inst, cfg, spec), nil
}

func resolve(ctx context.Context, v driver.Variant, spec driver.Spec, idOrName string) (string, error) {
	infos, err := v.List(ctx, spec, driver.Filter{})
	if err != nil {
		return "", err
	}
	var byName []driver.Info
	for _, i := range infos {
		if i.ID == idOrName {
			return i.ID, nil
		}
		if i.Name == idOrName {
			byName = append(byName, i)
		}
	}
	switch len(byName) {
	case 0:
		return "", fmt.Errorf("sandbox %q: %w on variant %s (it may have expired or been deleted)", idOrName, ErrNotFound, v.Name())
	case 1:
		return byName[0].ID, nil
	}
	return "", fmt.Errorf("%w: %d sandboxes are named %q; use an id", ErrInvalidInput, len(byName), idOrName)
}

// Info describes a sandbox.
type Info = driver.Info

// Environment is a named sandbox image.
type Environment = driver.Environment

// ListOptions filter List and Kill.
type ListOptions struct {
	Name string
	Tags map[string]string
}

// List lists the running sandboxes of cfg's variant.
func List(ctx context.Context, cfg Config, opts ListOptions) ([]Info, error) {
	v, spec, err := cfg.variant()
	if err != nil {
		return nil, err
	}
	return v.List(ctx, spec, driver.Filter{Name: opts.Name, Tags: opts.Tags})
}

// Kill ends sandboxes by id or name (idOrName) or by tags (opts) and returns
// the ids it killed. At least one selector is required.
func Kill(ctx context.Context, cfg Config, idOrName string, opts ListOptions) ([]string, error) {
	v, spec, err := cfg.variant()
	if err != nil {
		return nil, err
	}
	if idOrName == "" && opts.Name == "" && len(opts.Tags) == 0 {
		return nil, fmt.Errorf("%w: Kill needs an id, a name or tags (refusing to kill every sandbox)", ErrInvalidInput)
	}
	var ids []string
	if idOrName != "" {
		id, err := resolve(ctx, v, spec, idOrName)
		if err != nil {
			return nil, err
		}
		ids = []string{id}
	} else {
		infos, err := v.List(ctx, spec, driver.Filter{Name: opts.Name, Tags: opts.Tags})
		if err != nil {
			return nil, err
		}
		for _, i := range infos {
			ids = append(ids, i.ID)
		}
	}
	var killed []string
	for _, id := range ids {
		if err := v.Kill(ctx, spec, id); err != nil {
			return killed, err
		}
		killed = append(killed, id)
	}
	return killed, nil
}

// Sweep removes what dead sandboxes of cfg's variant left behind
// (processes, cgroups, records, containers, pods) and returns how many it
// removed. List never cleans up (a read has no side effects); Create and
// Kill sweep as they go, so Sweep is for a host that wants it done now.
// ErrNotSupported on a variant with nothing to sweep (e2b).
func Sweep(ctx context.Context, cfg Config) (int, error) {
	v, spec, err := cfg.variant()
	if err != nil {
		return 0, err
	}
	s, ok := v.(driver.Sweeper)
	if !ok {
		return 0, fmt.Errorf("%w: variant %s has nothing to sweep", ErrNotSupported, v.Name())
	}
	return s.Sweep(ctx, spec)
}

// ListEnvironments lists the environments of cfg's variant.
func ListEnvironments(ctx context.Context, cfg Config) ([]Environment, error) {
	v, spec, err := cfg.variant()
	if err != nil {
		return nil, err
	}
	return v.Environments(ctx, spec)
}

// Network is a sandbox's network policy, as Sandbox.UpdateNetwork changes
// it: the fields of Config with the same names (Policy is NetworkPolicy).
type Network struct {
	Policy       string
	AllowedHosts []string
	DeniedHosts  []string
	AllowPrivate bool
}

// checkNetworkFields checks that a policy's fields go together (each
// variant then checks the entries themselves); at Create, Policy "" is the
// variant's default.
func checkNetworkFields(n Network, atCreate bool) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...)
	}
	switch n.Policy {
	case "":
		if !atCreate {
			return bad("give a network policy: none, all or allowlist")
		}
	case NetworkNone, NetworkAll:
	case NetworkAllowlist:
		if len(n.AllowedHosts) == 0 {
			return bad("NetworkPolicy allowlist needs AllowedHosts")
		}
	default:
		return bad("unknown NetworkPolicy %q; use none, all or allowlist", n.Policy)
	}
	switch {
	case len(n.DeniedHosts) > 0 && n.Policy != NetworkAll:
		return bad("DeniedHosts is only meaningful with NetworkPolicy all")
	case len(n.AllowedHosts) > 0 && n.Policy == NetworkAll && len(n.DeniedHosts) == 0:
		return bad("AllowedHosts with NetworkPolicy all are exceptions to DeniedHosts; give DeniedHosts too, or use NetworkPolicy allowlist")
	case len(n.AllowedHosts) > 0 && n.Policy != NetworkAllowlist && n.Policy != NetworkAll:
		return bad("AllowedHosts is only meaningful with NetworkPolicy allowlist (or all, with DeniedHosts)")
	case n.AllowPrivate && n.Policy != NetworkAll && n.Policy != NetworkAllowlist:
		return bad("AllowPrivate is only meaningful with NetworkPolicy all or allowlist")
	}
	return nil
}
