// Package jupyter is the jupyter variant: code runs on an existing Jupyter
// Server, through its REST API (kernels, sessions, contents) and its kernel
// WebSocket (Jupyter messaging protocol 5). A sandbox is a connection to
// the server and a working directory on it; its contexts are kernels,
// started through sessions whose names say which sandbox they belong to
// (the variant's only record, so List, Get and Kill work from any process).
//
// The server is the caller's: it gives no isolation (the kernels run as
// the server's user, with its files and network), no resource limits, no
// lifetimes (its kernels live until shut down), no processes and no
// snapshots. Each of those is refused with ErrNotSupported and the reason,
// never pretended.
package jupyter

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// noLifetime is the variant's DefaultLifetime: the library fills it in
// when the caller set no MaxLifetime, so Create can tell "unset" (fine)
// from a lifetime it would have to enforce (refused).
const noLifetime = 100 * 365 * 24 * time.Hour

// Network is what Info says of a sandbox's network: the server's own,
// whatever that is; this variant neither grants nor restricts it.
const Network = "server"

// Variant is the jupyter variant.
type Variant struct{}

// Name implements driver.Variant.
func (Variant) Name() string { return "jupyter" }

// Capabilities implements driver.Variant.
func (Variant) Capabilities() driver.Capabilities {
	return driver.Capabilities{Interrupt: true, Variables: true, Files: true, DefaultLifetime: noLifetime}
}

// refuse checks spec against what a Jupyter Server can honour.
func refuse(spec driver.Spec) error {
	const why = "the jupyter variant runs code on a Jupyter Server it doesn't own"
	switch {
	case spec.Network != "" || len(spec.AllowedHosts) > 0 || len(spec.DeniedHosts) > 0 || spec.AllowPrivate:
		return fmt.Errorf("%w: NetworkPolicy on the jupyter variant: %s, whose kernels have the server host's own network; it can neither restrict nor grant one (leave the network settings unset, and firewall the server's host)", sberr.ErrNotSupported, why)
	case spec.MemoryBytes > 0 || spec.CPUs > 0 || spec.Pids > 0:
		return fmt.Errorf("%w: Memory, CPU and Pids limits on the jupyter variant: %s, which starts its kernels without limits; leave them unset (or Unlimited) and limit the server's own process", sberr.ErrNotSupported, why)
	case spec.Lifetime != noLifetime:
		return fmt.Errorf("%w: MaxLifetime on the jupyter variant: %s, whose kernels live until shut down (this variant can't end them when this process is gone); leave MaxLifetime unset, Close the sandbox, and let the server cull idle kernels (MappingKernelManager.cull_idle_timeout)", sberr.ErrNotSupported, why)
	case spec.Snapshot != "":
		return fmt.Errorf("%w: snapshots on the jupyter variant: a Jupyter Server can't save or fork a kernel's state", sberr.ErrNotSupported)
	case spec.AutoPause:
		return fmt.Errorf("%w: AutoPause on the jupyter variant: a Jupyter Server can't pause a kernel", sberr.ErrNotSupported)
	case len(spec.Packages) > 0:
		return fmt.Errorf("%w: Packages on the jupyter variant: %s; install them in the server's kernel environment", sberr.ErrNotSupported, why)
	case spec.Isolation != "":
		return fmt.Errorf("%w: isolation %q on the jupyter variant: %s, whose kernels run as the server's user with no isolation", sberr.ErrNotSupported, spec.Isolation, why)
	}
	return nil
}

// Create implements driver.Variant: it checks the server and the token,
// and starts the default kernel.
func (Variant) Create(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	if err := refuse(spec); err != nil {
		return nil, err
	}
	c, err := resolve(spec)
	if err != nil {
		return nil, err
	}
	ks, err := c.kernelSpecs(ctx)
	if err != nil {
		return nil, fmt.Errorf("jupyter server %s: %w", c.base.Redacted(), err)
	}
	language := "python"
	if spec.Environment != "" {
		s, ok := ks.Kernelspecs[spec.Environment]
		if !ok {
			return nil, fmt.Errorf("environment %q: %w: the Jupyter Server has no kernel spec of that name (Environments lists them)", spec.Environment, sberr.ErrNotFound)
		}
		language = normLanguage(s.Spec.Language)
	}
	i := newInstance(c, "jp-"+newID()[:20], spec, time.Now().UTC())
	k, err := i.context(ctx, "", language)
	if err != nil {
		i.stopAdapter()
		return nil, err
	}
	_ = k
	return i, nil
}

func newInstance(c *conf, id string, spec driver.Spec, created time.Time) *instance {
	i := &instance{c: c, id: id, name: spec.Name, tags: spec.Tags, env: spec.Env, environment: spec.Environment,
		created: created, contexts: map[string]*kctx{}}
	i.startAdapter()
	return i
}

// ours lists the server's sessions of this variant, by sandbox.
func ours(ctx context.Context, c *conf) (map[string][]struct {
	l label
	s session
}, error) {
	ss, err := c.sessions(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]struct {
		l label
		s session
	}{}
	for _, s := range ss {
		if l, ok := parseLabel(s.Name); ok && s.ID != "" && s.Kernel.ID != "" {
			out[l.Sandbox] = append(out[l.Sandbox], struct {
				l label
				s session
			}{l, s})
		}
	}
	return out, nil
}

// Connect implements driver.Variant: the sandbox's contexts are the
// sessions that name it.
func (Variant) Connect(ctx context.Context, id string, spec driver.Spec) (driver.Instance, error) {
	c, err := resolve(spec)
	if err != nil {
		return nil, err
	}
	all, err := ours(ctx, c)
	if err != nil {
		return nil, err
	}
	found := all[id]
	if len(found) == 0 {
		return nil, fmt.Errorf("sandbox %s: %w on the Jupyter Server (its kernels were shut down)", id, sberr.ErrNotFound)
	}
	first := found[0].l
	spec.Name, spec.Tags = first.Name, first.Tags
	i := newInstance(c, id, spec, first.Created)
	for _, f := range found {
		i.contexts[f.l.Context] = newKctx(f.l, f.s)
	}
	return i, nil
}

// List implements driver.Variant.
func (Variant) List(ctx context.Context, spec driver.Spec, f driver.Filter) ([]driver.Info, error) {
	c, err := resolve(spec)
	if err != nil {
		return nil, err
	}
	all, err := ours(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []driver.Info
	for id, found := range all {
		info := infoOf(id, found[0].l)
		if f.Match(info) {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].CreatedAt.Before(out[b].CreatedAt) })
	return out, nil
}

func infoOf(id string, l label) driver.Info {
	return driver.Info{ID: id, Variant: "jupyter", Name: l.Name, Tags: l.Tags, Status: "running", CreatedAt: l.Created, Network: Network}
}

// Kill implements driver.Variant: it shuts the sandbox's kernels down.
func (Variant) Kill(ctx context.Context, spec driver.Spec, id string) error {
	c, err := resolve(spec)
	if err != nil {
		return err
	}
	return killSessions(ctx, c, id)
}

func killSessions(ctx context.Context, c *conf, id string) error {
	all, err := ours(ctx, c)
	if err != nil {
		return err
	}
	found := all[id]
	if len(found) == 0 {
		return fmt.Errorf("sandbox %s: %w on the Jupyter Server", id, sberr.ErrNotFound)
	}
	var errs []error
	for _, f := range found {
		if err := c.deleteSession(ctx, f.s.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("shutting down the kernels of sandbox %s: %w", id, errs[0])
	}
	return nil
}

// Environments implements driver.Variant: the server's kernel specs (none
// when no server is configured).
func (Variant) Environments(ctx context.Context, spec driver.Spec) ([]driver.Environment, error) {
	c, err := resolve(spec)
	if err != nil {
		return nil, nil
	}
	ks, err := c.kernelSpecs(ctx)
	if err != nil {
		return nil, err
	}
	var out []driver.Environment
	for name, s := range ks.Kernelspecs {
		d := fmt.Sprintf("Jupyter kernel %q (%s) on %s", s.Spec.DisplayName, s.Spec.Language, c.base.Redacted())
		if name == ks.Default {
			d += ", the server's default"
		}
		out = append(out, driver.Environment{Name: name, Variant: "jupyter", Description: d})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// instance is one sandbox: a connection to the server, its contexts, and
// the in-process adapter that serves them to the library.
type instance struct {
	c           *conf
	id, name    string
	environment string
	tags        map[string]string
	env         map[string]string
	created     time.Time

	cl  *client.Client
	srv *http.Server
	ln  *memListener

	ctxMu    sync.Mutex
	contexts map[string]*kctx
}

func (i *instance) ID() string             { return i.id }
func (i *instance) Client() *client.Client { return i.cl }

// Info implements driver.Instance: the sandbox runs while the server has
// kernels of it.
func (i *instance) Info(ctx context.Context) (driver.Info, error) {
	all, err := ours(ctx, i.c)
	if err != nil {
		return driver.Info{}, err
	}
	found := all[i.id]
	if len(found) == 0 {
		return driver.Info{}, fmt.Errorf("sandbox %s: %w on the Jupyter Server (its kernels were shut down)", i.id, sberr.ErrNotFound)
	}
	info := infoOf(i.id, found[0].l)
	info.Environment = i.environment
	return info, nil
}

// SetTimeout implements driver.Instance: refused, there is no lifetime.
func (i *instance) SetTimeout(ctx context.Context, d time.Duration) error {
	return fmt.Errorf("%w: SetTimeout on the jupyter variant: its kernels live on a Jupyter Server that has no per-kernel lifetime; Close the sandbox when done", sberr.ErrNotSupported)
}

// Host implements driver.Instance: refused.
func (i *instance) Host(ctx context.Context, port int) (string, error) {
	return "", fmt.Errorf("%w: Host on the jupyter variant: a Jupyter Server forwards no ports of its kernels; reach the server's host directly", sberr.ErrNotSupported)
}

// Kill implements driver.Instance: every kernel of the sandbox is shut
// down, those other processes started included.
func (i *instance) Kill(ctx context.Context) error {
	for _, k := range i.listContexts() {
		k.closeConn()
	}
	err := killSessions(ctx, i.c, i.id)
	i.stopAdapter()
	return err
}

// Release implements driver.Instance: the connections close, the kernels
// stay.
func (i *instance) Release() error {
	for _, k := range i.listContexts() {
		k.closeConn()
	}
	i.stopAdapter()
	return nil
}
