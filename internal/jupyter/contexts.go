package jupyter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// sessionPrefix starts the name of every Jupyter session this variant
// makes; the rest is the label's JSON. The sessions are the variant's only
// record: List, Connect and Kill find a sandbox's kernels through them.
const sessionPrefix = "code-sandboxes "

// maxLabelBytes bounds a session name this variant reads back: another
// client of the server may have named a session anything.
const maxLabelBytes = 16 << 10

// label is what a session's name says about its sandbox and context.
type label struct {
	Sandbox  string            `json:"sandbox"`
	Name     string            `json:"name"`
	Context  string            `json:"context"`
	Language string            `json:"language"`
	Cwd      string            `json:"cwd"`
	Tags     map[string]string `json:"tags,omitempty"`
	Env      bool              `json:"env,omitempty"` // the sandbox sets environment variables in its kernels
	Created  time.Time         `json:"created"`
}

func (l label) String() string {
	b, _ := json.Marshal(l)
	return sessionPrefix + string(b)
}

// parseLabel reads a session's name; ok is false for sessions that aren't
// this variant's.
func parseLabel(name string) (label, bool) {
	if !strings.HasPrefix(name, sessionPrefix) || len(name) > maxLabelBytes {
		return label{}, false
	}
	var l label
	if json.Unmarshal([]byte(name[len(sessionPrefix):]), &l) != nil || !validID(l.Sandbox) || !validID(l.Context) {
		return label{}, false
	}
	return l, true
}

// validID accepts the ids this variant makes (and "default", "default-r").
func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// kctx is a context: a kernel of the server, through its session.
type kctx struct {
	id, language, cwd string
	sessionID         string
	kernelID          string

	sem     chan struct{} // one execution (or variable call) at a time
	running atomic.Bool

	mu       sync.Mutex
	kc       *kernelConn
	needInit bool // env not applied yet (new kernel, or restarted)
}

// conn gives the context's kernel connection, dialling it when there is
// none (or it ended).
func (k *kctx) conn(ctx context.Context, c *conf) (*kernelConn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kc != nil {
		select {
		case <-k.kc.dead:
			k.kc = nil
		default:
			return k.kc, nil
		}
	}
	kc, err := dialKernel(ctx, c, k.kernelID)
	if err != nil {
		return nil, err
	}
	if _, err := kc.ready(ctx); err != nil {
		kc.close()
		return nil, err
	}
	k.kc = kc
	return kc, nil
}

func (k *kctx) closeConn() {
	k.mu.Lock()
	kc := k.kc
	k.kc = nil
	k.mu.Unlock()
	if kc != nil {
		kc.close()
	}
}

// acquire takes the context's execution slot.
func (k *kctx) acquire(ctx context.Context) error {
	select {
	case k.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *kctx) release() { <-k.sem }

func newKctx(l label, s session) *kctx {
	return &kctx{id: l.Context, language: l.Language, cwd: l.Cwd, sessionID: s.ID, kernelID: s.Kernel.ID, sem: make(chan struct{}, 1), needInit: l.Env}
}

// pickSpec chooses the kernel spec of a language: the sandbox's
// Environment when it is one of that language, then the server's default,
// then the first of that language by name.
func pickSpec(ks kernelSpecs, language, environment string) (string, error) {
	langOf := func(name string) string { return strings.ToLower(ks.Kernelspecs[name].Spec.Language) }
	if environment != "" && langOf(environment) == language {
		return environment, nil
	}
	if ks.Default != "" && langOf(ks.Default) == language {
		return ks.Default, nil
	}
	names := make([]string, 0, len(ks.Kernelspecs))
	for n := range ks.Kernelspecs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if langOf(n) == language {
			return n, nil
		}
	}
	have := make([]string, 0, len(names))
	for _, n := range names {
		have = append(have, fmt.Sprintf("%s (%s)", n, langOf(n)))
	}
	return "", fmt.Errorf("%w: the Jupyter Server has no kernel for language %q; its kernels: %s", sberr.ErrInvalidInput, language, strings.Join(have, ", "))
}

// normLanguage maps the library's language names to Jupyter's.
func normLanguage(l string) string {
	l = strings.ToLower(strings.TrimSpace(l))
	switch l {
	case "", "python3", "py":
		return "python"
	case "js", "node":
		return "javascript"
	case "ts":
		return "typescript"
	case "sh":
		return "bash"
	}
	return l
}

// startContext starts a kernel through a new session.
func (i *instance) startContext(ctx context.Context, id, language, cwd string) (*kctx, error) {
	language = normLanguage(language)
	if len(i.env) > 0 && language != "python" {
		return nil, fmt.Errorf("%w: Env on a %s kernel: the jupyter variant sets environment variables with Python code (a Jupyter Server starts every kernel with its own environment); unset Env or use python", sberr.ErrNotSupported, language)
	}
	dir := i.c.dir
	if cwd != "" {
		var err error
		if dir, err = cleanRel(cwd); err != nil {
			return nil, fmt.Errorf("%w: context cwd: %w", sberr.ErrInvalidInput, err)
		}
	}
	// The server walks up from a missing directory to one that exists:
	// check it, or the kernel would silently start elsewhere.
	st, err := i.c.stat(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("context cwd /%s: %w", dir, err)
	}
	if st.Type != "directory" {
		return nil, fmt.Errorf("%w: context cwd /%s is not a directory", sberr.ErrInvalidInput, dir)
	}
	ks, err := i.c.kernelSpecs(ctx)
	if err != nil {
		return nil, err
	}
	specName, err := pickSpec(ks, language, i.environment)
	if err != nil {
		return nil, err
	}
	l := label{Sandbox: i.id, Name: i.name, Context: id, Language: language, Cwd: "/" + dir, Tags: i.tags, Env: len(i.env) > 0, Created: i.created}
	body := map[string]any{
		// The session's path only places the kernel: its directory is the
		// kernel's working directory; no such file is made.
		"path":   path.Join(dir, ".code-sandboxes-"+i.id+"-"+id),
		"name":   l.String(),
		"type":   "console",
		"kernel": map[string]string{"name": specName},
	}
	var s session
	if err := i.c.call(ctx, "start a kernel", http.MethodPost, "/api/sessions", body, &s); err != nil {
		return nil, err
	}
	k := newKctx(l, s)
	if _, err := k.conn(ctx, i.c); err != nil {
		_ = i.c.deleteSession(context.WithoutCancel(ctx), s.ID)
		return nil, err
	}
	return k, nil
}

func (c *conf) deleteSession(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := c.call(ctx, "shut down a kernel", http.MethodDelete, "/api/sessions/"+url.PathEscape(id), nil, nil)
	if isNotFound(err) {
		return nil
	}
	return err
}

// context finds a context by id; for "" it is the default context of
// language (started on first use).
func (i *instance) context(ctx context.Context, id, language string) (*kctx, error) {
	lazy := id == ""
	if lazy {
		id = "default"
		if l := normLanguage(language); l != "python" {
			id = "default-" + l
		}
	} else if language != "" {
		return nil, fmt.Errorf("%w: give a context or a language, not both", sberr.ErrInvalidInput)
	}
	i.ctxMu.Lock()
	defer i.ctxMu.Unlock()
	if k, ok := i.contexts[id]; ok {
		return k, nil
	}
	if !lazy {
		return nil, fmt.Errorf("context %s: %w", id, sberr.ErrNotFound)
	}
	if !validID(id) {
		return nil, fmt.Errorf("%w: language %q", sberr.ErrInvalidInput, language)
	}
	k, err := i.startContext(ctx, id, language, "")
	if err != nil {
		return nil, err
	}
	i.contexts[id] = k
	return k, nil
}

// createContext is POST /contexts.
func (i *instance) createContext(ctx context.Context, language, cwd string) (*kctx, error) {
	id := newID()[:16]
	k, err := i.startContext(ctx, id, language, cwd)
	if err != nil {
		return nil, err
	}
	i.ctxMu.Lock()
	i.contexts[id] = k
	i.ctxMu.Unlock()
	return k, nil
}

func (i *instance) listContexts() []*kctx {
	i.ctxMu.Lock()
	defer i.ctxMu.Unlock()
	out := make([]*kctx, 0, len(i.contexts))
	for _, k := range i.contexts {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b *kctx) int { return strings.Compare(a.id, b.id) })
	return out
}

// deleteContext shuts a context's kernel down.
func (i *instance) deleteContext(ctx context.Context, id string) error {
	i.ctxMu.Lock()
	k, ok := i.contexts[id]
	delete(i.contexts, id)
	i.ctxMu.Unlock()
	if !ok {
		return fmt.Errorf("context %s: %w", id, sberr.ErrNotFound)
	}
	k.closeConn()
	return i.c.deleteSession(ctx, k.sessionID)
}

// restartContext restarts a context's kernel: its state is lost.
func (i *instance) restartContext(ctx context.Context, k *kctx) error {
	if err := i.c.call(ctx, "restart a kernel", http.MethodPost, "/api/kernels/"+url.PathEscape(k.kernelID)+"/restart", nil, nil); err != nil {
		return err
	}
	k.mu.Lock()
	k.needInit = len(i.env) > 0
	k.mu.Unlock()
	return nil
}

// interrupt interrupts a context's kernel; it reports whether an execution
// was running.
func (i *instance) interrupt(ctx context.Context, k *kctx) (bool, error) {
	running := k.running.Load()
	if err := i.c.call(ctx, "interrupt a kernel", http.MethodPost, "/api/kernels/"+url.PathEscape(k.kernelID)+"/interrupt", nil, nil); err != nil {
		return false, err
	}
	return running, nil
}
