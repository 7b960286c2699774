// Package driver is the contract between the public package and the variants
// (local, docker, e2b, …). It lives apart from both so that variants don't
// import the public package and the public package can embed the default one.
package driver

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
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
	// Snapshot, when set, creates the sandbox from that snapshot (a fork).
	Snapshot string
	// AutoPause: the lifetime's end pauses the sandbox instead of
	// killing it (variants that can pause).
	AutoPause   bool
	Variant     string
	Name        string
	Tags        map[string]string
	Environment string
	Lifetime    time.Duration
	IdleTimeout time.Duration // 0 = none
	MemoryBytes int64
	CPUs        float64
	Pids        int64
	Env         map[string]string
	WorkingDir  string
	Network     string // none | all | allowlist
	// Isolation is the isolation level: "" (the variant's default,
	// namespaces), "namespaces" or "gvisor". A variant refuses a level it
	// doesn't list in Capabilities.Isolations.
	Isolation    string
	AllowedHosts []string
	AllowPrivate bool // network all/allowlist may reach the private ranges
	// DeniedHosts (network all): IPs and CIDRs refused unless AllowedHosts
	// lists them (E2B's denyOut; AllowedHosts are then its allowOut).
	DeniedHosts  []string
	Packages     []string
	PackageIndex string
	// EnvironmentDir is the environment store ("" = its default).
	EnvironmentDir string
	// BuildOutput receives build progress (nil = os.Stderr).
	BuildOutput io.Writer
	// Volumes are mounted read-write into the sandbox (Capabilities.Volumes);
	// their paths are checked (sandboxes.CheckVolumePath).
	Volumes []Volume
	// Options are the variant's own settings, of the type its package
	// defines (local.Options, docker.Options, …); nil = its defaults. The
	// shared Spec knows no variant: a new one adds a package, not fields.
	Options any
}

// OptionsOf returns spec.Options as the variant's own type T (a T or a
// non-nil *T; nil gives T's zero value, the variant's defaults). Another
// type is a configuration error that names what the variant takes.
func OptionsOf[T any](spec Spec) (T, error) {
	var zero T
	switch o := spec.Options.(type) {
	case nil:
		return zero, nil
	case T:
		return o, nil
	case *T:
		if o != nil {
			return *o, nil
		}
		return zero, nil
	}
	// A variant's public package declares its Options with the same fields
	// as the variant's own (documented where users read them, without an
	// alias to an internal type): convert a struct of identical shape.
	v := reflect.ValueOf(spec.Options)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return zero, nil
		}
		v = v.Elem()
	}
	if t := reflect.TypeFor[T](); v.Kind() == reflect.Struct && t.Kind() == reflect.Struct && v.Type().ConvertibleTo(t) {
		return v.Convert(t).Interface().(T), nil
	}
	return zero, fmt.Errorf("%w: the %s variant takes options of its package's type Options, got %T", sberr.ErrInvalidConfig, spec.Variant, spec.Options)
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
	// AllowedHosts and DeniedHosts are the sandbox's egress rules as its
	// variant enforces them, where it reports them (e2b: the allowOut and
	// denyOut E2B's API answers; an allowlist there is allowOut plus a
	// denied 0.0.0.0/0).
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
	DeniedHosts  []string `json:"denied_hosts,omitempty"`
	// Environment and BuildID say what the sandbox runs on; a sandbox pins
	// the build id it started from.
	Environment string `json:"environment,omitempty"`
	BuildID     string `json:"build_id,omitempty"`
	// Isolation is the sandbox's isolation level where it isn't the
	// default (namespaces): "gvisor".
	Isolation string `json:"isolation,omitempty"`
}

// Capabilities say which optional operations a variant supports; an
// operation a variant lacks answers ErrNotSupported, never a silent no-op.
type Capabilities struct {
	Interrupt, Variables, Host, Commands, Files, Watch, SetTimeout bool
	Networks                                                       []string
	Limits                                                         bool
	Packages                                                       bool
	// IdleTimeout: the variant ends a sandbox unused for Spec.IdleTimeout.
	IdleTimeout bool
	// Isolations are the isolation levels the variant offers besides its
	// default ("namespaces"), e.g. "gvisor".
	Isolations []string
	// Volumes: the variant mounts Spec.Volumes; one that can't is
	// refused before Create.
	Volumes bool
	// DefaultLifetime replaces the package's default lifetime (24 h) when
	// the caller gives none: a service that caps lifetimes lower (E2B's
	// hobby tier: 1 h) would refuse the default otherwise.
	DefaultLifetime time.Duration
}

// Volume is a directory that outlives sandboxes, mounted read-write at
// Path. Source is a host directory (local, docker) or the name of a
// PersistentVolumeClaim in the sandbox's namespace (kubernetes).
type Volume struct {
	Source string
	Path   string
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
	UpdateNetwork(ctx context.Context, p NetworkPolicy) error
}

// NetworkPolicy is what a sandbox may reach: Spec's Network, AllowedHosts,
// DeniedHosts and AllowPrivate.
type NetworkPolicy struct {
	Network      string
	AllowedHosts []string
	DeniedHosts  []string
	AllowPrivate bool
}

// NetworkPolicy is the spec's network policy.
func (s Spec) NetworkPolicy() NetworkPolicy {
	return NetworkPolicy{Network: s.Network, AllowedHosts: s.AllowedHosts, DeniedHosts: s.DeniedHosts, AllowPrivate: s.AllowPrivate}
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

var (
	regMu    sync.RWMutex
	registry = map[string]Variant{}
)

// Register makes a variant available by its name, as database/sql drivers
// do: a variant's package calls it from init, so importing the package is
// what adds the variant (the public package embeds only local).
func Register(v Variant) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[v.Name()]; dup {
		panic("sandboxes: variant " + v.Name() + " registered twice")
	}
	registry[v.Name()] = v
}

// Lookup returns the variant registered under name, or nil.
func Lookup(name string) Variant {
	regMu.RLock()
	defer regMu.RUnlock()
	return registry[name]
}

// Names lists the registered variants, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return slices.Clip(out)
}

// InstanceOf returns the Instance behind a *sandboxes.Sandbox (nil for
// anything else). The public package sets it at init, so that the servers
// under internal/ (serve's proxy) reach a sandbox's agent through the
// variant interface, whatever the variant, without the public API exposing
// the agent client.
var InstanceOf func(sandbox any) Instance

// Usage is one sample of a sandbox's resource use, read from its cgroup.
type Usage struct {
	Time     time.Time
	CPUTime  time.Duration // CPU time used since the sandbox started
	CPUs     float64       // its CPU limit in cores; 0 = none
	MemUsed  int64         // bytes in use, page cache excluded
	MemCache int64         // page cache bytes
	MemLimit int64         // its memory limit; 0 = none
	// DiskUsed is what its tmpfs file systems hold (charged to the cgroup
	// as shared memory).
	DiskUsed int64
}

// UsageReader is implemented by instances that can report their usage;
// others answer ErrNotSupported where usage is asked for.
type UsageReader interface {
	Usage(ctx context.Context) (Usage, error)
}

// EnvironmentBuilder is a variant that builds environments on its own host
// (the e2b variant: an E2B template) instead of in the local store. spec
// carries the variant's settings and BuildOutput; env is an
// *environment.Spec (any, so this package needs no import of it).
type EnvironmentBuilder interface {
	BuildEnvironment(ctx context.Context, spec Spec, env any, force bool) (Environment, error)
}

// ConfigSpec checks the root package's *Config and gives its variant and
// Spec: set by that package's init for the public packages beside it
// (environments) that act on a Config but can't call its methods.
var ConfigSpec func(cfg any) (Variant, Spec, error)
