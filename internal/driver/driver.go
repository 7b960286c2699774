// Package driver is the contract between the public package and the variants
// (local, docker, e2b, …). It lives apart from both so that variants don't
// import the public package and the public package can embed the default one.
package driver

import (
	"context"
	"io"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
)

// Spec is a validated, normalised sandbox request.
// DefaultMemoryBytes is the memory limit of a sandbox whose Spec says 0,
// on the variants that enforce one (local, docker, kubernetes). It covers
// the sandbox's RAM-backed tmpfs mounts too (/home/user, /tmp, /files and
// /dev/shm can hold about 2.6 GiB together): without a limit one sandbox
// could take the host's memory.
const DefaultMemoryBytes = 1 << 30

// Unlimited, as Spec.MemoryBytes or Spec.Pids, asks for no limit at all.
const Unlimited = -1

// Memory resolves MemoryBytes: the default for 0, 0 (no limit) for
// Unlimited.
func (s Spec) Memory() int64 {
	switch s.MemoryBytes {
	case 0:
		return DefaultMemoryBytes
	case Unlimited:
		return 0
	}
	return s.MemoryBytes
}

// PidsLimit resolves Pids: def for 0, 0 (no limit) for Unlimited.
func (s Spec) PidsLimit(def int64) int64 {
	switch s.Pids {
	case 0:
		return def
	case Unlimited:
		return 0
	}
	return s.Pids
}

type Spec struct {
	Variant      string
	Name         string
	Tags         map[string]string
	Environment  string
	Lifetime     time.Duration
	MemoryBytes  int64
	CPUs         float64
	Pids         int64
	Env          map[string]string
	WorkingDir   string
	Network      string // none | all | allowlist
	AllowedHosts []string
	Packages     []string
	PackageIndex string
	// EnvironmentDir is the environment store ("" = its default).
	EnvironmentDir string
	// BuildOutput receives build progress (nil = os.Stderr).
	BuildOutput io.Writer
	// Variant-specific settings, typed by each variant.
	Local      LocalSpec
	Docker     DockerSpec
	Kubernetes KubernetesSpec
	E2B        E2BSpec
}

// KubernetesSpec holds the kubernetes variant's own settings (see
// sandboxes.KubernetesConfig).
type KubernetesSpec struct {
	Kubeconfig, Context, Namespace string
	Image, ImagePullPolicy         string
	RuntimeClassName               string
	UserNamespaces                 bool
	NodeSelector                   map[string]string
	Tolerations                    []Toleration
	NetworkPolicyEnforced          bool
	WarmPool                       int
}

// Toleration is a pod toleration.
type Toleration struct {
	Key, Operator, Value, Effect string
	TolerationSeconds            *int64
}

// DockerSpec holds the docker variant's own settings.
type DockerSpec struct {
	Host      string // engine address; "" = $DOCKER_HOST or the default socket
	AgentPath string // static agent binary; "" = os.Executable() when static
	Runtime   string // OCI runtime name; "" = the engine's default
}

// LocalSpec holds the local variant's own settings.
type LocalSpec struct {
	RuntimeDir string // where sandboxes keep their records and sockets
	Python     string // interpreter inside the sandbox; "" = python3 from PATH
}

// E2BSpec holds the e2b variant's own settings; empty strings mean the
// SDKs' environment variables (E2B_API_KEY, E2B_DOMAIN, …) and defaults.
type E2BSpec struct {
	APIKey, Domain, Template string
	AllowInternetAccess      *bool // nil = true
	Secure                   *bool // nil = true
	APIURL, SandboxURL       string
	Debug, ListAll           bool
}

// Info describes a sandbox.
type Info struct {
	ID        string            `json:"id"`
	Variant   string            `json:"variant"`
	Name      string            `json:"name"`
	Tags      map[string]string `json:"tags,omitempty"`
	Status    string            `json:"status"`
	CreatedAt time.Time         `json:"created_at"`
	EndAt     time.Time         `json:"end_at,omitzero"`
	Memory    int64             `json:"memory_bytes,omitempty"`
	CPUs      float64           `json:"cpus,omitempty"`
	Network   string            `json:"network,omitempty"`
	// Environment and BuildID say what the sandbox runs on; a sandbox pins
	// the build id it started from.
	Environment string `json:"environment,omitempty"`
	BuildID     string `json:"build_id,omitempty"`
}

// Capabilities say which optional operations a variant supports; an
// operation a variant lacks answers ErrNotSupported, never a silent no-op.
type Capabilities struct {
	Interrupt, Variables, Host, Commands, Files, Watch, SetTimeout bool
	Networks                                                       []string
	Limits                                                         bool
	Packages                                                       bool
}

// Environment is a named sandbox image.
type Environment struct {
	Name        string `json:"name"`
	Variant     string `json:"variant"`
	Description string `json:"description"`
	BuildID     string `json:"build_id,omitempty"`
}

// Filter selects sandboxes for List and Kill.
type Filter struct {
	ID   string
	Name string
	Tags map[string]string
}

// Match reports whether info passes the filter.
func (f Filter) Match(i Info) bool {
	if f.ID != "" && f.ID != i.ID {
		return false
	}
	if f.Name != "" && f.Name != i.Name {
		return false
	}
	for k, v := range f.Tags {
		if i.Tags[k] != v {
			return false
		}
	}
	return true
}

// Instance is one running sandbox as a variant sees it.
type Instance interface {
	ID() string
	Client() *client.Client
	Info(ctx context.Context) (Info, error)
	SetTimeout(ctx context.Context, d time.Duration) error
	// Host returns "host:port" on which the caller reaches port inside the sandbox.
	Host(ctx context.Context, port int) (string, error)
	// Kill ends the sandbox and everything in it.
	Kill(ctx context.Context) error
	// Release frees what this process holds for the sandbox (forwarders,
	// connections) without ending it.
	Release() error
}

// Sweeper is a Variant that can remove what dead sandboxes left behind
// (processes, cgroups, records, containers, pods). List never does: a read
// has no side effects; Create and Kill sweep as they go, and Sweep does it
// on demand. It returns how many dead sandboxes it removed.
type Sweeper interface {
	Sweep(ctx context.Context, spec Spec) (int, error)
}

// Variant launches and finds sandboxes.
type Variant interface {
	Name() string
	Capabilities() Capabilities
	Create(ctx context.Context, spec Spec) (Instance, error)
	Connect(ctx context.Context, id string, spec Spec) (Instance, error)
	List(ctx context.Context, spec Spec, f Filter) ([]Info, error)
	Kill(ctx context.Context, spec Spec, id string) error
	Environments(ctx context.Context, spec Spec) ([]Environment, error)
}
