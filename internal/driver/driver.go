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
	AllowPrivate bool // network all/allowlist may reach the private ranges
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

// NetworkUpdater is an Instance whose network policy can change while it
// runs.
type NetworkUpdater interface {
	UpdateNetwork(ctx context.Context, network string, allowedHosts []string, allowPrivate bool) error
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
