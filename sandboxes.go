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
	"regexp"
	"sort"
	"strings"
	"sync"
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
	// ErrInvalidInput: a request argument was refused.
	ErrInvalidInput = sberr.ErrInvalidInput
)

// Network policies.
const (
	NetworkNone      = "none"
	NetworkAll       = "all"
	NetworkAllowlist = "allowlist"
)

// Unlimited, as Config.Memory or Config.Pids, asks for no limit at all.
const Unlimited = driver.Unlimited

// DefaultMemory is the memory limit (1 GiB) of a sandbox created with
// Memory 0 on the local, docker and kubernetes variants, CLI and serve
// included. It bounds the RAM-backed tmpfs mounts too.
const DefaultMemory = driver.DefaultMemoryBytes

// Config describes a sandbox. The zero value is a local sandbox with no
// network, the host's python3 and a one-day lifetime.
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
	// the last SetTimeout). Default 24h.
	MaxLifetime time.Duration
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

	Local      LocalConfig
	Docker     DockerConfig
	Kubernetes KubernetesConfig
	E2B        E2BConfig
}

// KubernetesConfig holds settings of the kubernetes variant (a pod per
// sandbox on any cluster).
type KubernetesConfig struct {
	// Kubeconfig is the kubeconfig file; "" = $KUBECONFIG, else
	// ~/.kube/config, else the in-cluster service account.
	Kubeconfig string
	// Context is the kubeconfig context; "" = its current context.
	Context string
	// Namespace holds the sandboxes' pods; "" = the kubeconfig's, else
	// "default".
	Namespace string
	// Image is the pod image; it must contain the agent at
	// /opt/code-sandboxes/agent (`code-sandboxes environments export`
	// makes one). "" = code-sandboxes-env:<build id> of Environment.
	Image string
	// ImagePullPolicy: Always, IfNotPresent (default) or Never.
	ImagePullPolicy string
	// RuntimeClassName selects gVisor, Kata … where the cluster has them.
	RuntimeClassName string
	// UserNamespaces runs each pod in its own user namespace (hostUsers:
	// false): uid 1000 inside is an unprivileged, per-pod range on the node,
	// not the node's uid 1000. Set it where the nodes support it
	// (Kubernetes ≥ 1.33, or 1.30+ with the UserNamespacesSupport gate;
	// containerd ≥ 2.0 or CRI-O ≥ 1.25; Linux ≥ 6.3 for idmapped tmpfs);
	// elsewhere pods fail to start with the runtime's reason.
	UserNamespaces bool
	NodeSelector   map[string]string
	Tolerations    []Toleration
	// NetworkPolicyEnforced asserts that the cluster's network plugin
	// enforces NetworkPolicy; without it (or a plugin the variant knows to
	// enforce) network none and allowlist are refused, not silently open.
	NetworkPolicyEnforced bool
	// WarmPool keeps this many ready sandboxes per environment and hands
	// one out on Create (0 = none).
	WarmPool int
}

// Toleration is a pod toleration (core/v1 Toleration's fields).
type Toleration struct {
	Key, Operator, Value, Effect string
	TolerationSeconds            *int64
}

// DockerConfig holds settings of the docker variant.
type DockerConfig struct {
	// Host is the Docker Engine address; "" = $DOCKER_HOST, else the
	// local socket.
	Host string
	// AgentPath is a static Linux build of this program or of
	// code-sandboxes-agent, bind-mounted into containers as their init;
	// "" = this program itself when it is static.
	AgentPath string
	// Runtime is the OCI runtime (for example runsc); "" = the engine's
	// default.
	Runtime string
}

// E2BConfig holds settings of the e2b variant (E2B's cloud or any
// E2B-compatible host, such as code-sandboxes serve). Empty values are read
// as E2B's SDKs do: APIKey from $E2B_API_KEY, Domain from $E2B_DOMAIN
// (default e2b.app), APIURL from $E2B_API_URL (default https://api.<domain>),
// SandboxURL from $E2B_SANDBOX_URL, Debug from $E2B_DEBUG=true.
type E2BConfig struct {
	APIKey string
	Domain string
	// Template is the E2B template; default code-interpreter-v1 (or Environment).
	Template string
	// AllowInternetAccess applies when NetworkPolicy is empty; nil = true.
	AllowInternetAccess *bool
	// Secure asks for an envd access token; nil = true.
	Secure     *bool
	APIURL     string
	SandboxURL string
	Debug      bool
	// ListAll makes List and Get see every sandbox of the team, not only
	// those created by code-sandboxes.
	ListAll bool
}

// LocalConfig holds settings of the local variant.
type LocalConfig struct {
	// RuntimeDir keeps sandbox records and sockets; default
	// $CODE_SANDBOXES_RUNTIME_DIR, else /run/code-sandboxes (root) or
	// $XDG_RUNTIME_DIR/code-sandboxes.
	RuntimeDir string
	// Python is the interpreter inside the sandbox; default python3 from PATH
	// (/usr/local/bin:/usr/bin:/bin).
	Python string
}

var (
	regMu    sync.RWMutex
	registry = map[string]driver.Variant{}
)

// register adds a variant; variants call it from init.
func register(v driver.Variant) {
	regMu.Lock()
	defer regMu.Unlock()
	registry[v.Name()] = v
}

// Variants lists the registered variant names.
func Variants() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
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
	regMu.RLock()
	v := registry[name]
	regMu.RUnlock()
	if v == nil {
		return nil, fmt.Errorf("%w: unknown sandbox variant %q; supported variants: %s", ErrInvalidConfig, name, strings.Join(Variants(), ", "))
	}
	return v, nil
}

var tagKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)

func (c Config) spec() (driver.Spec, error) {
	bad := func(format string, a ...any) (driver.Spec, error) {
		return driver.Spec{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...)
	}
	s := driver.Spec{
		Variant: NormalizeVariant(c.Variant), Name: c.Name, Tags: c.Tags, Environment: c.Environment,
		Lifetime: c.MaxLifetime, MemoryBytes: c.Memory, CPUs: c.CPU, Pids: c.Pids, Env: c.Env,
		WorkingDir: c.WorkingDir, Network: strings.ToLower(strings.TrimSpace(c.NetworkPolicy)),
		AllowedHosts: c.AllowedHosts, Packages: c.Packages, PackageIndex: c.PackageIndex,
		EnvironmentDir: c.EnvironmentDir, BuildOutput: c.BuildOutput,
		Local:      driver.LocalSpec{RuntimeDir: c.Local.RuntimeDir, Python: c.Local.Python},
		Docker:     driver.DockerSpec{Host: c.Docker.Host, AgentPath: c.Docker.AgentPath, Runtime: c.Docker.Runtime},
		Kubernetes: c.Kubernetes.spec(),
		E2B: driver.E2BSpec{APIKey: c.E2B.APIKey, Domain: c.E2B.Domain, Template: c.E2B.Template,
			AllowInternetAccess: c.E2B.AllowInternetAccess, Secure: c.E2B.Secure, APIURL: c.E2B.APIURL,
			SandboxURL: c.E2B.SandboxURL, Debug: c.E2B.Debug, ListAll: c.E2B.ListAll},
	}
	if s.Variant == "" {
		s.Variant = "local"
	}
	if s.Lifetime == 0 {
		s.Lifetime = 24 * time.Hour
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
	switch s.Network {
	case "", "inherit":
		s.Network = ""
	case NetworkNone, NetworkAll:
	case NetworkAllowlist:
		if len(c.AllowedHosts) == 0 {
			return bad("NetworkPolicy allowlist needs AllowedHosts")
		}
	default:
		return bad("unknown NetworkPolicy %q; use none, all or allowlist", c.NetworkPolicy)
	}
	if len(c.AllowedHosts) > 0 && s.Network != NetworkAllowlist {
		return bad("AllowedHosts is only meaningful with NetworkPolicy allowlist")
	}
	for k := range c.Tags {
		if !tagKey.MatchString(k) {
			return bad("tag key %q: use letters, digits, '.', '_', '/', '-' (at most 63)", k)
		}
	}
	if len(c.Name) > 63 {
		return bad("Name is longer than 63 characters")
	}
	if c.WorkingDir != "" && !strings.HasPrefix(c.WorkingDir, "/") {
		return bad("WorkingDir must be an absolute path inside the sandbox, got %q", c.WorkingDir)
	}
	for k := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return bad("environment variable name %q is invalid", k)
		}
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
	return v, spec, err
}

// Create starts a sandbox and returns when it answers.
func Create(ctx context.Context, cfg Config) (*Sandbox, error) {
	v, spec, err := cfg.variant()
	if err != nil {
		return nil, err
	}
	inst, err := v.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return newSandbox(v, inst, cfg, spec), nil
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

func (k KubernetesConfig) spec() driver.KubernetesSpec {
	s := driver.KubernetesSpec{Kubeconfig: k.Kubeconfig, Context: k.Context, Namespace: k.Namespace, Image: k.Image,
		ImagePullPolicy: k.ImagePullPolicy, RuntimeClassName: k.RuntimeClassName, NodeSelector: k.NodeSelector,
		NetworkPolicyEnforced: k.NetworkPolicyEnforced, WarmPool: k.WarmPool, UserNamespaces: k.UserNamespaces}
	for _, t := range k.Tolerations {
		s.Tolerations = append(s.Tolerations, driver.Toleration(t))
	}
	return s
}
