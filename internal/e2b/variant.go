package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Metadata keys the variant keeps on every sandbox it creates.
const (
	metaCreatedBy = "created-by"
	metaName      = "name"
	createdBy     = "code-sandboxes"
)

// Variant is the e2b variant.
type Variant struct{}

// Name implements driver.Variant.
func (Variant) Name() string { return "e2b" }

// Capabilities implements driver.Variant. Variables and Interrupt need our
// /x/ extension, which only E2B-compatible hosts running our agent (code
// sandboxes serve) offer; the capability table is per variant, so they are
// reported here and a sandbox on a host without the extension answers
// variables with ErrNotSupported (and the reason) and Interrupt with false.
// Limits are the template's on E2B, so the variant refuses them.
func (Variant) Capabilities() driver.Capabilities {
	return driver.Capabilities{Interrupt: true, Variables: true, Host: true, Commands: true, Files: true,
		Watch: true, SetTimeout: true, Networks: []string{"none", "all", "allowlist"}, Limits: false, Packages: true,
		// E2B caps a sandbox at 1 h on its hobby tier (24 h on pro): a
		// default every team can create; SetTimeout extends it.
		DefaultLifetime: time.Hour}
}

// Environments implements driver.Variant: the default template, then,
// when an API key is configured, the team's templates built by
// code-sandboxes (those with a build tag of ours), newest build of each.
func (Variant) Environments(ctx context.Context, spec driver.Spec) ([]driver.Environment, error) {
	out := []driver.Environment{{Name: EnvironmentName, Variant: "e2b", BuildID: DefaultTemplate,
		Description: "E2B's code interpreter template (" + DefaultTemplate + "): Python with a Jupyter kernel, numpy, pandas, matplotlib…; any other E2B template id or alias is accepted as Environment or e2b.Options.Template"}}
	c, err := resolve(spec)
	if err != nil || c.debug || c.apiKey == "" {
		return out, nil // nothing to ask without a key
	}
	built, err := ourTemplates(ctx, api{c: c})
	return append(out, built...), err
}

// template picks the E2B template from Environment and e2b.Options.Template.
func template(spec driver.Spec) (string, error) {
	opts, err := optionsOf(spec)
	if err != nil {
		return "", err
	}
	if spec.Snapshot != "" {
		// A fork: E2B's snapshots are templates (Sandbox.create(snapshotID)).
		if err := checkSnapshotName(spec.Snapshot); err != nil {
			return "", err
		}
		if opts.Template != "" || (spec.Environment != "" && spec.Environment != EnvironmentName) {
			return "", fmt.Errorf("%w: Snapshot %q is the sandbox's whole state, its template included; unset Environment / e2b.Options.Template", sberr.ErrInvalidConfig, spec.Snapshot)
		}
		return spec.Snapshot, nil
	}
	env := spec.Environment
	if env == EnvironmentName {
		env = DefaultTemplate
	}
	t := opts.Template
	switch {
	case t != "" && env != "" && t != env:
		return "", fmt.Errorf("%w: Environment %q and e2b.Options.Template %q disagree; give one", sberr.ErrInvalidConfig, spec.Environment, t)
	case t != "":
		return t, nil
	case env != "":
		return env, nil
	}
	return DefaultTemplate, nil
}

// createBody validates spec against what E2B can honour and builds the
// NewSandbox body.
func createBody(spec driver.Spec) (sandboxCreate, error) {
	var b sandboxCreate
	opts, err := optionsOf(spec)
	if err != nil {
		return b, err
	}
	if b.TemplateID, err = template(spec); err != nil {
		return b, err
	}
	switch {
	case spec.MemoryBytes > 0:
		return b, fmt.Errorf("%w: Memory limits on E2B come from the template (e2b template build --memory-mb), not from the request; unset Memory or pick a template built with the memory you need", sberr.ErrNotSupported)
	case spec.CPUs > 0:
		return b, fmt.Errorf("%w: CPU limits on E2B come from the template (e2b template build --cpu-count), not from the request; unset CPU or pick a template built with the CPUs you need", sberr.ErrNotSupported)
	case spec.Pids > 0:
		return b, fmt.Errorf("%w: E2B has no per-sandbox process limit; unset Pids", sberr.ErrNotSupported)
	}
	b.Timeout = seconds(spec.Lifetime)
	b.Secure = opts.Secure == nil || *opts.Secure
	b.EnvVars = spec.Env
	b.Metadata = map[string]string{metaCreatedBy: createdBy, metaName: spec.Name}
	for k, v := range spec.Tags {
		if k == metaCreatedBy || k == metaName {
			return b, fmt.Errorf("%w: tag %q is reserved by the e2b variant (it keeps the sandbox's name and creator in E2B metadata)", sberr.ErrInvalidConfig, k)
		}
		b.Metadata[k] = v
	}
	aia := opts.AllowInternetAccess
	switch spec.Network {
	case "":
		// The default is no network, as on every variant (E2B's own
		// default is internet access: ask for it with NetworkPolicy all).
		b.AllowInternetAccess = aia != nil && *aia
	default:
		var err error
		if b.AllowInternetAccess, b.Network, err = networkOf(spec.NetworkPolicy()); err != nil {
			return b, err
		}
		if aia != nil && *aia != b.AllowInternetAccess {
			return b, fmt.Errorf("%w: NetworkPolicy %s contradicts e2b.Options.AllowInternetAccess %v; give one", sberr.ErrInvalidConfig, spec.Network, *aia)
		}
	}
	if len(spec.Packages) > 0 && !b.AllowInternetAccess {
		return b, fmt.Errorf("%w: Packages are pip-installed inside the sandbox, which needs network to reach the package index; allow internet access (NetworkPolicy all) or use a template that has them", sberr.ErrInvalidConfig)
	}
	for _, p := range spec.Packages {
		if p == "" || strings.HasPrefix(p, "-") || strings.ContainsAny(p, " \t\r\n\x00") {
			return b, fmt.Errorf("%w: package %q: give a requirement such as name or name==1.2 (no options, no spaces)", sberr.ErrInvalidConfig, p)
		}
	}
	return b, nil
}

// Create implements driver.Variant: POST /sandboxes.
func (v Variant) Create(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	c, err := resolve(spec)
	if err != nil {
		return nil, err
	}
	body, err := createBody(spec)
	if err != nil {
		return nil, err
	}
	var sb sandboxJSON
	if c.debug {
		// As the SDKs: debug mode makes no API call; envd and the
		// interpreter are on localhost.
		sb = sandboxJSON{SandboxID: debugSandboxID, TemplateID: body.TemplateID, EnvdVersion: "99.99.99"}
	} else {
		if _, err := (api{c: c}).call(ctx, "create sandbox", http.MethodPost, "/sandboxes", "", body, &sb); err != nil {
			var ae *APIError
			if errors.As(err, &ae) && ae.Status == http.StatusBadRequest && body.Network != nil {
				ae.hint = "the host refused NetworkPolicy allowlist (network.allowOut) with the reason above"
			} else if errors.As(err, &ae) && ae.Status == http.StatusNotFound && spec.Snapshot != "" {
				ae.hint = fmt.Sprintf("snapshot %q does not exist on this E2B team (Sandbox.Snapshot makes one)", spec.Snapshot)
			} else if errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.Contains(strings.ToLower(ae.Message), "timeout") {
				ae.hint = fmt.Sprintf("the sandbox's timeout is MaxLifetime (%ds here; 24h when unset); set a MaxLifetime your E2B plan allows", body.Timeout)
			}
			return nil, err
		}
		if err := checkID(sb.SandboxID); err != nil {
			return nil, fmt.Errorf("create sandbox: the E2B API answered an unusable sandbox id: %w", err)
		}
		if versionLess(sb.EnvdVersion, 0, 1, 0) {
			_ = kill(context.WithoutCancel(ctx), c, sb.SandboxID)
			return nil, fmt.Errorf("%w: sandbox %s runs envd %q, older than 0.1.0 (as E2B's SDKs, refused); rebuild the template", sberr.ErrNotSupported, sb.SandboxID, sb.EnvdVersion)
		}
	}
	if body.Network != nil && !c.debug {
		if err := checkNetworkKept(ctx, c, sb.SandboxID, body.Network); err != nil {
			_ = kill(context.WithoutCancel(ctx), c, sb.SandboxID)
			return nil, err
		}
	}
	inst := newInstance(c, sb)
	if err := inst.setup(ctx, spec); err != nil {
		_ = inst.Kill(context.WithoutCancel(ctx))
		_ = inst.Release()
		return nil, err
	}
	return inst, nil
}

// Connect implements driver.Variant: POST /sandboxes/{id}/connect (which
// also resumes a paused sandbox). Connect only ever extends a sandbox's life,
// and the request must name a timeout, so it asks for what the sandbox has
// left (read first from GET /sandboxes/{id}).
func (v Variant) Connect(ctx context.Context, id string, spec driver.Spec) (driver.Instance, error) {
	c, err := resolve(spec)
	if err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	if c.debug {
		return newInstance(c, sandboxJSON{SandboxID: id, EnvdVersion: "99.99.99"}), nil
	}
	info, err := getInfo(ctx, c, id)
	if err != nil {
		return nil, err
	}
	left := time.Until(info.EndAt)
	if info.Status != "running" || left <= 0 {
		left = 5 * time.Minute // a paused sandbox resumes with the SDKs' default
	}
	var sb sandboxJSON
	if _, err := (api{c: c}).call(ctx, "connect to sandbox", http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/connect", id,
		map[string]int64{"timeout": seconds(left)}, &sb); err != nil {
		return nil, err
	}
	if sb.SandboxID == "" {
		sb.SandboxID = id
	}
	return newInstance(c, sb), nil
}

// maxListPages stops a server whose X-Next-Token never ends.
const maxListPages = 1000

// List implements driver.Variant: GET /v2/sandboxes, page by page. Unless
// e2b.Options.ListAll, only the sandboxes code-sandboxes created are listed.
func (v Variant) List(ctx context.Context, spec driver.Spec, f driver.Filter) ([]driver.Info, error) {
	c, err := resolve(spec)
	if err != nil {
		return nil, err
	}
	meta := map[string]string{}
	for k, val := range f.Tags {
		meta[k] = val
	}
	if f.Name != "" {
		meta[metaName] = f.Name
	}
	if !c.listAll {
		meta[metaCreatedBy] = createdBy
	}
	q := url.Values{"limit": {"100"}}
	if len(meta) > 0 {
		q.Set("metadata", metadataQuery(meta))
	}
	var out []driver.Info
	seen := map[string]bool{}
	for page := 0; ; page++ {
		if page == maxListPages {
			return out, fmt.Errorf("list sandboxes: more than %d pages; the API's X-Next-Token never ended", maxListPages)
		}
		var items []sandboxDetail
		h, err := (api{c: c}).call(ctx, "list sandboxes", http.MethodGet, "/v2/sandboxes?"+q.Encode(), "", nil, &items)
		if err != nil {
			return out, err
		}
		for _, it := range items {
			i := infoOf(it)
			if seen[i.ID] || !f.Match(i) || (!c.listAll && it.Metadata[metaCreatedBy] != createdBy) {
				continue
			}
			seen[i.ID] = true
			out = append(out, i)
		}
		next := h.Get("X-Next-Token")
		if next == "" || next == q.Get("nextToken") {
			return out, nil
		}
		q.Set("nextToken", next)
	}
}

// metadataQuery encodes a metadata filter as E2B's JS SDK does: pairs of
// encodeURIComponent(key)=encodeURIComponent(value) form-encoded (so twice)
// and joined with '&'; the query string then encodes the whole once more.
func metadataQuery(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, url.QueryEscape(encodeURIComponent(k))+"="+url.QueryEscape(encodeURIComponent(m[k])))
	}
	return strings.Join(parts, "&")
}

// encodeURIComponent escapes as JavaScript's (space as %20, not +).
func encodeURIComponent(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// Kill implements driver.Variant: DELETE /sandboxes/{id}.
func (v Variant) Kill(ctx context.Context, spec driver.Spec, id string) error {
	c, err := resolve(spec)
	if err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return err
	}
	return kill(ctx, c, id)
}

// networkOf maps a network policy onto E2B's allow_internet_access and
// network (allowOut wins over denyOut on E2B, as here).
func networkOf(np driver.NetworkPolicy) (bool, *networkConfig, error) {
	if np.AllowPrivate {
		// E2B always denies the private ranges (its DeniedSandboxCIDRs come
		// before the user's allowOut).
		return false, nil, fmt.Errorf("%w: AllowPrivate on the e2b variant: E2B never lets a sandbox reach the private ranges", sberr.ErrNotSupported)
	}
	switch np.Network {
	case "none":
		return false, nil, nil
	case "all":
		if len(np.DeniedHosts) == 0 {
			return true, nil, nil
		}
		return true, &networkConfig{AllowOut: np.AllowedHosts, DenyOut: np.DeniedHosts}, nil
	case "allowlist":
		// Only the allowed hosts, everything else denied.
		return true, &networkConfig{AllowOut: np.AllowedHosts, DenyOut: []string{"0.0.0.0/0"}}, nil
	}
	return false, nil, fmt.Errorf("%w: network policy %q", sberr.ErrInvalidConfig, np.Network)
}
