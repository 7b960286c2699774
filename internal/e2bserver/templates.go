package e2bserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/environment"
)

// E2B's template API (the npm SDK's Template.build and friends), answered
// with our environment builder. A template is a team's name for a series of
// builds; each build is a content-addressed environment, and a sandbox
// created from the template pins the environment's build id, so a rebuild
// under the same name never moves a running sandbox.
//
// State lives beside the environment store, in e2b-templates/<team>/: one
// templates.json (written whole and renamed into place, so a crash leaves
// the old or the new file, never half of one) and the uploaded archives of
// copy steps, by the hash the SDK named them with. Hashes are the client's
// word, not ours, so uploads are kept per team: a team can only poison its
// own cache. Builds run one at a time.

// Limits of the template API.
const (
	maxTemplatesPerTeam = 200
	maxBuildsKept       = 20 // per template; older finished builds are forgotten
	maxUploadBytes      = 256 << 20
	maxLogEntries       = 20_000 // per build; beyond it one "truncated" line
	maxLogLine          = 4 << 10
	logPage             = 100 // entries per status answer, as E2B's API
	uploadURLLifetime   = time.Hour
)

// maxTagsPerTemplate bounds a template's tags, counting those its builds
// in progress will assign (templates.json is rewritten whole on every
// change, and every resolve walks it).
const maxTagsPerTemplate = 64

var (
	templateNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	tagRE          = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$`)
	filesHashRE    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// tplBuild is one build of a template.
type tplBuild struct {
	ID         string     `json:"buildID"`
	EnvID      string     `json:"envID,omitempty"` // the environment build, once ready
	Status     string     `json:"status"`          // waiting, building, ready, error
	Reason     string     `json:"reason,omitempty"`
	Step       string     `json:"step,omitempty"`
	Tags       []string   `json:"tags,omitempty"` // assigned when it is ready
	CPUCount   int        `json:"cpuCount"`
	MemoryMB   int        `json:"memoryMB"`
	CreatedAt  time.Time  `json:"createdAt"`
	UpdatedAt  time.Time  `json:"updatedAt"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	Workdir    string     `json:"workdir,omitempty"`
	User       string     `json:"user,omitempty"`
	// StartCmd runs in every sandbox made from the build (setStartCmd),
	// and the sandbox is handed out once ReadyCmd exits 0 (setReadyCmd).
	StartCmd string `json:"startCmd,omitempty"`
	ReadyCmd string `json:"readyCmd,omitempty"`
	// Files are the hashes of the uploaded archives its COPY steps use:
	// they go with the template (templates_uploads.go).
	Files     []string `json:"files,omitempty"`
	logs      *buildLog
	triggered bool
}

// tplTag is a tag pointing at a build.
type tplTag struct {
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

type template struct {
	ID        string             `json:"templateID"`
	Name      string             `json:"name"`
	CreatedAt time.Time          `json:"createdAt"`
	UpdatedAt time.Time          `json:"updatedAt"`
	Builds    []*tplBuild        `json:"builds"` // oldest first
	Tags      map[string]*tplTag `json:"tags"`
	SpawnedAt *time.Time         `json:"lastSpawnedAt"`
	Spawns    int64              `json:"spawnCount"`
}

// templateStore holds every team's templates.
type templateStore struct {
	dir     string // <environment store>/e2b-templates
	store   *environment.Store
	enabled bool
	secret  [32]byte
	queue   chan queuedBuild

	// ctx is every build's parent: close cancels it, so a shutdown ends
	// running builds (their steps killed, their work dirs removed).
	ctx        context.Context
	cancel     context.CancelFunc
	workerDone chan struct{} // closed when the queue's goroutine ended

	mu      sync.Mutex
	teams   map[string][]*template // loaded lazily
	started bool                   // the queue's goroutine runs (t.mu)
	closed  bool                   // shut down: nothing more is queued (t.mu)

	uploadQuota int64            // a team's bytes of stored archives
	reserved    map[string]int64 // bytes uploads in progress set aside, by team (t.mu)
	sweptAt     time.Time        // the last sweep of unused archives (t.mu)
}

func newTemplates(envDir string, enabled bool, loopback []int) (*templateStore, error) {
	return newTemplatesQuota(envDir, enabled, loopback, 0)
}

// newTemplatesQuota is newTemplates with a team's upload quota in bytes
// (0: defaultUploadQuota).
func newTemplatesQuota(envDir string, enabled bool, loopback []int, uploadQuota int64) (*templateStore, error) {
	if uploadQuota < 0 {
		return nil, fmt.Errorf("the template upload quota must not be negative (%d)", uploadQuota)
	}
	if uploadQuota == 0 {
		uploadQuota = defaultUploadQuota
	}
	st, err := environment.Open(envDir)
	if err != nil {
		return nil, err
	}
	st.LoopbackPorts = loopback
	// fromImage is a tenant's word: its pulls go where build steps may
	// (never this machine's own addresses but the opened loopback ports),
	// and their errors never repeat what a registry answered.
	st.TenantPulls = true
	t := &templateStore{dir: filepath.Join(st.Dir, "e2b-templates"), store: st, enabled: enabled,
		queue: make(chan queuedBuild, 1024), teams: map[string][]*template{}, workerDone: make(chan struct{}), uploadQuota: uploadQuota}
	if _, err := rand.Read(t.secret[:]); err != nil {
		return nil, err
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

// teamDir is a team's directory; team names are validated, but hashing
// keeps any name out of path syntax.
func (t *templateStore) teamDir(team string) string {
	h := sha256.Sum256([]byte(team))
	return filepath.Join(t.dir, hex.EncodeToString(h[:12]))
}

// load returns the team's templates (t.mu held). Builds a restart cut short
// are marked failed: their names were never published.
func (t *templateStore) load(team string) []*template {
	if l, ok := t.teams[team]; ok {
		return l
	}
	var l []*template
	if raw, err := os.ReadFile(filepath.Join(t.teamDir(team), "templates.json")); err == nil {
		_ = json.Unmarshal(raw, &l)
	}
	// A corrupt record's nulls (a template, a build, a tag) are dropped:
	// every lookup of the team would dereference them.
	l = slices.DeleteFunc(l, func(tp *template) bool { return tp == nil })
	for _, tp := range l {
		tp.Builds = slices.DeleteFunc(tp.Builds, func(b *tplBuild) bool { return b == nil })
		maps.DeleteFunc(tp.Tags, func(_ string, tg *tplTag) bool { return tg == nil })
		if tp.Tags == nil {
			tp.Tags = map[string]*tplTag{}
		}
		for _, b := range tp.Builds {
			if b.Status == "waiting" || b.Status == "building" {
				b.Status, b.Reason = "error", "the server restarted during the build; build again"
			}
		}
	}
	t.teams[team] = l
	return l
}

// save writes the team's templates (t.mu held).
func (t *templateStore) save(team string) error {
	dir := t.teamDir(team)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(t.teams[team], "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".templates.json.tmp")
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "templates.json"))
}

// find resolves a template ID or name (t.mu held).
func (t *templateStore) find(team, ref string) *template {
	for _, tp := range t.load(team) {
		if tp.ID == ref || tp.Name == ref {
			return tp
		}
	}
	return nil
}

func (tp *template) build(id string) *tplBuild {
	for _, b := range tp.Builds {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// resolve maps "name", "name:tag" or a template ID to the environment
// build a sandbox should pin: the tag's build ("default" when none is
// given), else the newest ready build.
func (t *templateStore) resolve(team, ref string, spawn bool) (tp *template, envID string, err error) {
	tp, l, err := t.resolveLaunch(team, ref, spawn)
	return tp, l.envID, err
}

// launch is what a sandbox on a template build needs: the environment
// build and the start and ready commands.
type launch struct {
	envID, start, ready string
}

// maxLaunchCmd bounds a start or ready command.
const maxLaunchCmd = 16 << 10

// resolveLaunch is resolve with the build's start and ready commands.
func (t *templateStore) resolveLaunch(team, ref string, spawn bool) (tp *template, l launch, err error) {
	name, tag, _ := strings.Cut(ref, ":")
	t.mu.Lock()
	defer t.mu.Unlock()
	tp = t.find(team, name)
	if tp == nil {
		return nil, l, errTemplateNotFound
	}
	pick := func(id string) string {
		if b := tp.build(id); b != nil && b.Status == "ready" {
			l = launch{envID: b.EnvID, start: b.StartCmd, ready: b.ReadyCmd}
			return b.EnvID
		}
		return ""
	}
	envID := ""
	if tag != "" {
		if tg := tp.Tags[tag]; tg != nil {
			envID = pick(tg.BuildID)
		}
		if envID == "" {
			return nil, launch{}, fmt.Errorf("template %s has no ready build tagged %q", name, tag)
		}
	} else {
		if tg := tp.Tags["default"]; tg != nil {
			envID = pick(tg.BuildID)
		}
		for i := len(tp.Builds) - 1; envID == "" && i >= 0; i-- {
			envID = pick(tp.Builds[i].ID)
		}
		if envID == "" {
			return nil, launch{}, fmt.Errorf("template %s has no finished build yet", name)
		}
	}
	if spawn {
		now := time.Now().UTC()
		tp.SpawnedAt, tp.Spawns = &now, tp.Spawns+1
		_ = t.save(team)
	}
	return tp, l, nil
}

var errTemplateNotFound = errors.New("template not found")

func randomID(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// --- HTTP handlers -------------------------------------------------------

func (s *Server) templateRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v3/templates", s.requestBuild)
	mux.HandleFunc("GET /templates/{templateID}/files/{hash}", s.fileUploadLink)
	mux.HandleFunc("POST /v2/templates/{templateID}/builds/{buildID}", s.triggerBuild)
	mux.HandleFunc("GET /templates/{templateID}/builds/{buildID}/status", s.buildStatus)
	mux.HandleFunc("GET /templates/{templateID}/builds/{buildID}/logs", s.buildLogs)
	mux.HandleFunc("GET /templates", s.listTemplates)
	mux.HandleFunc("GET /templates/{templateID}", s.getTemplate)
	mux.HandleFunc("DELETE /templates/{templateID}", s.deleteTemplate)
	// /templates/aliases/{alias} and /templates/{templateID}/tags overlap
	// for ServeMux ("/templates/aliases/tags"): one route, split here.
	mux.HandleFunc("GET /templates/{templateID}/{sub}", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.PathValue("templateID") == "aliases":
			s.templateAlias(w, r)
		case r.PathValue("sub") == "tags":
			s.templateTags(w, r)
		default:
			writeError(w, http.StatusNotFound, "no route for %s %s on this server", r.Method, r.URL.Path)
		}
	})
	mux.HandleFunc("POST /templates/tags", s.assignTags)
	mux.HandleFunc("DELETE /templates/tags", s.deleteTags)
	for _, p := range []string{"POST /templates", "POST /v2/templates", "POST /templates/{templateID}", "PATCH /templates/{templateID}",
		"PATCH /v2/templates/{templateID}", "POST /templates/{templateID}/builds/{buildID}"} {
		mux.HandleFunc(p, s.notSupported("this template API call (the v1 Dockerfile builds and template updates); build with the SDK's Template builder (Template.build), which uses /v3/templates"))
	}
}

// ownTemplate finds the caller's template named in the path, or answers 404.
func (s *Server) ownTemplate(w http.ResponseWriter, r *http.Request) (*template, string, bool) {
	k := caller(r)
	id := r.PathValue("templateID")
	s.templates.mu.Lock()
	tp := s.templates.find(k.Team, id)
	s.templates.mu.Unlock()
	if tp == nil {
		writeError(w, http.StatusNotFound, "template %q not found", id)
		return nil, "", false
	}
	return tp, k.Team, true
}
