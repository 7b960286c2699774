package e2bserver

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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

// buildLog is a build's log as E2B's status endpoint pages it.
type buildLog struct {
	mu      sync.Mutex
	entries []logEntry
	partial []byte
	cut     bool
}

type logEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

func (l *buildLog) add(level, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addLocked(level, msg)
}

func (l *buildLog) addLocked(level, msg string) {
	if len(l.entries) >= maxLogEntries {
		if !l.cut {
			l.cut = true
			l.entries = append(l.entries, logEntry{time.Now().UTC(), "warn", "log truncated: the full log is in the server's environment store", ""})
		}
		return
	}
	if len(msg) > maxLogLine {
		msg = msg[:maxLogLine] + "…"
	}
	l.entries = append(l.entries, logEntry{time.Now().UTC(), level, msg, ""})
}

// Write splits the builder's output into entries, one per line.
func (l *buildLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := strings.IndexByte(string(l.partial), '\n')
		if i < 0 {
			if len(l.partial) > maxLogLine { // a very long line: cut it
				l.addLocked("info", string(l.partial))
				l.partial = l.partial[:0]
			}
			return len(p), nil
		}
		line := strings.TrimRight(string(l.partial[:i]), "\r")
		l.partial = l.partial[i+1:]
		if strings.TrimSpace(line) != "" {
			l.addLocked("info", line)
		}
	}
}

// progressSummary passes on the builder's progress lines but its step
// lines ("  [2/5] …", "    step 1: …"), which the full log already has.
type progressSummary struct{ l *buildLog }

func (p progressSummary) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if t := strings.TrimLeft(line, " "); t != "" && !strings.HasPrefix(t, "[") && !strings.HasPrefix(t, "step ") {
			_, _ = p.l.Write([]byte(line))
		}
	}
	return len(b), nil
}

func (l *buildLog) page(offset int) []logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset < 0 || offset >= len(l.entries) {
		return []logEntry{}
	}
	end := min(offset+logPage, len(l.entries))
	return slices.Clone(l.entries[offset:end])
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

type requestBuildBody struct {
	Name     string   `json:"name"`
	Alias    string   `json:"alias"`
	Tags     []string `json:"tags"`
	TeamID   string   `json:"teamID"`
	CPUCount int      `json:"cpuCount"`
	MemoryMB int      `json:"memoryMB"`
}

func (s *Server) requestBuild(w http.ResponseWriter, r *http.Request) {
	k := caller(r)
	t := s.templates
	if !t.enabled {
		writeError(w, http.StatusForbidden, "template builds are off on this server: its operator can turn them on with `serve --template-builds` (build steps run as root, with reduced capabilities, in a chroot on the server's machine; see SECURITY.md)")
		return
	}
	var req requestBuildBody
	if !decode(w, r, &req, false) {
		return
	}
	name := req.Name
	if name == "" {
		name = req.Alias
	}
	name, tag, hasTag := strings.Cut(name, ":")
	tags := slices.Clone(req.Tags)
	if hasTag {
		tags = append(tags, tag)
	}
	if !templateNameRE.MatchString(name) || slices.Contains(templates, name) {
		writeError(w, http.StatusBadRequest, "template name %q: use lowercase letters, digits, '-' and '_' (at most 63), not a built-in name (%s)", name, strings.Join(templates, ", "))
		return
	}
	if len(tags) > 16 {
		writeError(w, http.StatusBadRequest, "at most 16 tags")
		return
	}
	for _, tg := range tags {
		if !tagRE.MatchString(tg) {
			writeError(w, http.StatusBadRequest, "tag %q: use letters, digits, '.', '-' and '_' (at most 63)", tg)
			return
		}
	}
	if len(tags) == 0 {
		tags = []string{"default"}
	}
	if req.CPUCount <= 0 { // the SDK's defaults, for what the API reports back
		req.CPUCount = 2
	}
	if req.MemoryMB <= 0 {
		req.MemoryMB = 1024
	}
	now := time.Now().UTC()
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.find(k.Team, name)
	if tp == nil {
		if len(t.load(k.Team)) >= maxTemplatesPerTeam {
			writeError(w, http.StatusTooManyRequests, "this team has %d templates, the most a team may have; delete some", maxTemplatesPerTeam)
			return
		}
		tp = &template{ID: randomID(20), Name: name, CreatedAt: now, UpdatedAt: now, Tags: map[string]*tplTag{}}
		t.teams[k.Team] = append(t.load(k.Team), tp)
	}
	if n := tp.tagsWith(tags); n > maxTagsPerTemplate {
		writeError(w, http.StatusBadRequest, "template %s would have %d tags, at most %d: delete some (DELETE /templates/tags) first", name, n, maxTagsPerTemplate)
		return
	}
	for _, b := range tp.Builds {
		if b.Status == "waiting" && !b.triggered && now.Sub(b.CreatedAt) > time.Hour {
			b.Status, b.Reason = "error", "never started"
		}
	}
	b := &tplBuild{ID: uuid4(), Status: "waiting", Tags: tags, CPUCount: req.CPUCount, MemoryMB: req.MemoryMB, CreatedAt: now, UpdatedAt: now, logs: &buildLog{}}
	tp.Builds = append(tp.Builds, b)
	tp.pruneBuilds()
	if err := t.save(k.Team); err != nil {
		writeError(w, http.StatusInternalServerError, "saving the template: %v", err)
		return
	}
	s.log.Info("template build requested", "team", k.Team, "key", keyID(k.Key), "template", tp.ID, "name", name, "build", b.ID)
	writeJSON(w, http.StatusAccepted, map[string]any{"templateID": tp.ID, "buildID": b.ID, "public": false,
		"names": []string{name}, "aliases": []string{name}, "tags": tags})
}

// tagsWith is how many distinct tags tp would have with more added: its
// tags, those its builds in progress will assign, and more (t.mu held).
func (tp *template) tagsWith(more []string) int {
	all := map[string]bool{}
	for tg := range tp.Tags {
		all[tg] = true
	}
	for _, b := range tp.Builds {
		if b.Status == "waiting" || b.Status == "building" {
			for _, tg := range b.Tags {
				all[tg] = true
			}
		}
	}
	for _, tg := range more {
		all[tg] = true
	}
	return len(all)
}

// pruneBuilds forgets the oldest finished builds beyond maxBuildsKept,
// never one a tag points at.
func (tp *template) pruneBuilds() {
	for len(tp.Builds) > maxBuildsKept {
		dropped := false
		for i, b := range tp.Builds {
			tagged := false
			for _, tg := range tp.Tags {
				tagged = tagged || tg.BuildID == b.ID
			}
			if !tagged && (b.Status == "ready" || b.Status == "error") {
				tp.Builds = append(tp.Builds[:i], tp.Builds[i+1:]...)
				dropped = true
				break
			}
		}
		if !dropped {
			return
		}
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

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func (t *templateStore) uploadPath(team, hash string) string {
	return filepath.Join(t.teamDir(team), "files", hash+".tar")
}

func (t *templateStore) uploadToken(team, templateID, hash string, expires int64) string {
	m := hmac.New(sha256.New, t.secret[:])
	fmt.Fprintf(m, "%s\x00%s\x00%s\x00%d", team, templateID, hash, expires)
	return hex.EncodeToString(m.Sum(nil))
}

func (s *Server) fileUploadLink(w http.ResponseWriter, r *http.Request) {
	tp, team, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	hash := r.PathValue("hash")
	if !filesHashRE.MatchString(hash) {
		writeError(w, http.StatusBadRequest, "files hash %q: give the SDK's 64 hex digits", hash)
		return
	}
	s.templates.maybeSweep()
	if p := s.templates.uploadPath(team, hash); fileExists(p) {
		now := time.Now()
		_ = os.Chtimes(p, now, now) // asked for: in use again
		writeJSON(w, http.StatusCreated, map[string]any{"present": true})
		return
	}
	// The SDK PUTs the archive to this URL without its API key (it is an
	// S3 presigned URL at E2B): the signature stands for the key, for this
	// team, template and hash only, for an hour.
	expires := time.Now().Add(uploadURLLifetime).Unix()
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u := fmt.Sprintf("%s://%s/templates/%s/files/%s/upload?team=%s&expires=%d&signature=%s", scheme, r.Host, tp.ID, hash,
		hex.EncodeToString([]byte(team)), expires, s.templates.uploadToken(team, tp.ID, hash, expires))
	writeJSON(w, http.StatusCreated, map[string]any{"present": false, "url": u})
}

// isUpload reports whether r is a signed archive upload (served without
// an API key).
func isUpload(r *http.Request) bool {
	return r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/templates/") && strings.HasSuffix(r.URL.Path, "/upload") &&
		r.URL.Query().Has("signature")
}

// upload stores a copy step's archive from a signed URL.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/templates/"), "/")
	q := r.URL.Query()
	teamRaw, err := hex.DecodeString(q.Get("team"))
	expires, err2 := strconv.ParseInt(q.Get("expires"), 10, 64)
	if len(parts) != 4 || parts[1] != "files" || !filesHashRE.MatchString(parts[2]) || err != nil || err2 != nil {
		writeError(w, http.StatusBadRequest, "malformed upload URL")
		return
	}
	team, tplID, hash := string(teamRaw), parts[0], parts[2]
	want := s.templates.uploadToken(team, tplID, hash, expires)
	if !hmac.Equal([]byte(want), []byte(q.Get("signature"))) || time.Now().Unix() > expires {
		s.metrics.refused.WithLabelValues("token").Inc()
		writeError(w, http.StatusForbidden, "the upload URL's signature is wrong or expired; ask for a new one")
		return
	}
	if r.ContentLength > maxUploadBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "an upload may be at most %d bytes", maxUploadBytes)
		return
	}
	s.templates.maybeSweep()
	// Set the bytes aside before reading any: uploads of a team in
	// parallel share its quota, never each pass it alone.
	size := int64(maxUploadBytes)
	if r.ContentLength >= 0 {
		size = r.ContentLength
	}
	limit, release := s.templates.reserveUpload(team, size)
	defer release()
	if limit < size && r.ContentLength >= 0 || limit == 0 && size > 0 {
		writeError(w, http.StatusRequestEntityTooLarge, "%s", s.templates.quotaError(team, r.ContentLength))
		return
	}
	dst := s.templates.uploadPath(team, hash)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".upload-")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r.Body, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		writeError(w, http.StatusBadRequest, "reading the upload: %v", err)
		return
	case n > maxUploadBytes:
		writeError(w, http.StatusRequestEntityTooLarge, "an upload may be at most %d bytes", maxUploadBytes)
		return
	case n > limit:
		writeError(w, http.StatusRequestEntityTooLarge, "%s", s.templates.quotaError(team, -1))
		return
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// startBody is E2B's TemplateBuildStartV2.
type startBody struct {
	FromImage         string          `json:"fromImage"`
	FromTemplate      string          `json:"fromTemplate"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry"`
	Force             bool            `json:"force"`
	Steps             []struct {
		Type      string   `json:"type"`
		Args      []string `json:"args"`
		FilesHash string   `json:"filesHash"`
		Force     bool     `json:"force"`
	} `json:"steps"`
	StartCmd string `json:"startCmd"`
	ReadyCmd string `json:"readyCmd"`
}

// builtinBases are the bases that are our "python" environment: the E2B
// templates the SDKs name, and the image E2B's Template() starts from.
var builtinBases = []string{"base", "code-interpreter-v1", "e2bdev/base", "e2bdev/base:latest", "e2bdev/code-interpreter", "e2bdev/code-interpreter:latest"}

// envName is the environment store's name of a team's template.
func envName(team, name string) string {
	sum := sha256.Sum256([]byte(team + "\x00" + name))
	return "tpl-" + hex.EncodeToString(sum[:12])
}

// specOf turns a template build into an environment spec, or says which
// part can't be built here.
func (s *Server) specOf(team string, tp *template, body *startBody) (*environment.Spec, string, error) {
	spec := &environment.Spec{Name: envName(team, tp.Name), Description: "E2B template " + tp.Name + " of team " + team}
	switch {
	case len(body.FromImageRegistry) > 0 && string(body.FromImageRegistry) != "null":
		return nil, "base", errors.New("fromImageRegistry (registry credentials, AWS or GCP) is not supported: use a public image, or a template built here")
	case body.FromTemplate != "" && body.FromImage != "":
		return nil, "base", errors.New("give fromImage or fromTemplate, not both")
	case slices.Contains(builtinBases, body.FromTemplate) || slices.Contains(builtinBases, body.FromImage):
		spec.Base.Environment = "python"
	case body.FromTemplate != "":
		_, envID, err := s.templates.resolve(team, body.FromTemplate, false)
		if err != nil {
			return nil, "base", fmt.Errorf("fromTemplate %q: %w", body.FromTemplate, err)
		}
		spec.Base.Environment = envID
	case body.FromImage != "":
		spec.Base.Image = body.FromImage
		host, _, _ := strings.Cut(body.FromImage, "/")
		// A registry on this machine's loopback serves plain HTTP; any
		// other registry must speak TLS.
		spec.Base.Insecure = strings.HasPrefix(host, "127.0.0.1:") || strings.HasPrefix(host, "localhost:") || strings.HasPrefix(host, "[::1]:")
	default:
		return nil, "base", errors.New("give fromImage or fromTemplate")
	}
	for _, c := range []string{body.StartCmd, body.ReadyCmd} {
		if len(c) > maxLaunchCmd || strings.ContainsRune(c, 0) {
			return nil, "finalize", fmt.Errorf("start and ready commands: at most %d bytes, no NUL", maxLaunchCmd)
		}
	}
	if len(body.Steps) > 256 {
		return nil, "base", errors.New("at most 256 steps")
	}
	for i, st := range body.Steps {
		step := strconv.Itoa(i + 1)
		arg := func(n int) string {
			if n < len(st.Args) {
				return st.Args[n]
			}
			return ""
		}
		switch st.Type {
		case "RUN":
			if arg(0) == "" || len(st.Args) > 2 {
				return nil, step, errors.New("RUN takes a command and optionally a user")
			}
			spec.Steps = append(spec.Steps, environment.Step{Run: arg(0), User: arg(1)})
		case "COPY":
			if !filesHashRE.MatchString(st.FilesHash) {
				return nil, step, errors.New("COPY without a filesHash")
			}
			archive := s.templates.uploadPath(team, st.FilesHash)
			if _, err := os.Stat(archive); err != nil {
				return nil, step, fmt.Errorf("the files of COPY %s were not uploaded (hash %s)", arg(0), st.FilesHash[:12])
			}
			now := time.Now()
			_ = os.Chtimes(archive, now, now) // used: the sweep keeps it uploadTTL more
			spec.Steps = append(spec.Steps, environment.Step{Copy: &environment.CopyStep{Archive: archive, Src: arg(0), Dest: arg(1), Owner: arg(2), Mode: arg(3)}})
		case "ENV":
			if len(st.Args)%2 != 0 || len(st.Args) == 0 {
				return nil, step, errors.New("ENV takes key, value pairs")
			}
			env := map[string]string{}
			for j := 0; j < len(st.Args); j += 2 {
				env[st.Args[j]] = st.Args[j+1]
			}
			spec.Steps = append(spec.Steps, environment.Step{Env: env})
		case "WORKDIR":
			if len(st.Args) != 1 {
				return nil, step, errors.New("WORKDIR takes a path")
			}
			spec.Steps = append(spec.Steps, environment.Step{Workdir: arg(0)})
		case "USER":
			if len(st.Args) != 1 || arg(0) == "" {
				return nil, step, errors.New("USER takes a user")
			}
			spec.Steps = append(spec.Steps, environment.Step{User: arg(0)})
		default:
			return nil, step, fmt.Errorf("step type %q is not supported here (RUN, COPY, ENV, WORKDIR and USER are)", st.Type)
		}
	}
	// Our validation, with the step the SDK can point at.
	check := *spec
	check.Steps = nil
	for i, st := range spec.Steps {
		check.Steps = []environment.Step{st}
		if err := environment.Validate(&check); err != nil {
			return nil, strconv.Itoa(i + 1), err
		}
	}
	if err := environment.Validate(spec); err != nil {
		return nil, "base", err
	}
	return spec, "", nil
}

func (s *Server) triggerBuild(w http.ResponseWriter, r *http.Request) {
	tp, team, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	t := s.templates
	var body startBody
	if !decode(w, r, &body, true) {
		return
	}
	t.mu.Lock()
	b := tp.build(r.PathValue("buildID"))
	switch {
	case b == nil:
		t.mu.Unlock()
		writeError(w, http.StatusNotFound, "build %q of template %s not found", r.PathValue("buildID"), tp.ID)
		return
	case b.triggered || b.Status != "waiting":
		t.mu.Unlock()
		writeError(w, http.StatusConflict, "build %s was already started", b.ID)
		return
	}
	b.triggered = true
	b.StartCmd, b.ReadyCmd = body.StartCmd, body.ReadyCmd
	for _, st := range body.Steps {
		if st.Type == "COPY" && filesHashRE.MatchString(st.FilesHash) && !slices.Contains(b.Files, st.FilesHash) {
			b.Files = append(b.Files, st.FilesHash)
		}
	}
	t.mu.Unlock()
	spec, step, err := s.specOf(team, tp, &body)
	if err != nil {
		// Refused before anything runs: the status says why, at which step.
		s.finishBuild(team, tp, b, "", step, err)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	b.logs.add("info", fmt.Sprintf("Build %s queued (one build at a time on this server)", b.ID))
	// Triggered is "building" in E2B's API (its own queue included), which
	// the SDK's buildInBackground + getBuildStatus expect; "waiting" is a
	// build not triggered yet.
	t.mu.Lock()
	b.Status, b.UpdatedAt = "building", time.Now().UTC()
	_ = t.save(team)
	var refused error
	switch {
	case t.closed:
		refused = errBuildShutdown
	default:
		if !t.started { // the queue's goroutine, from the first build on
			t.started = true
			go s.buildWorker()
		}
		force := body.Force
		select { // t.mu held: close can't slip between the check and the send
		case t.queue <- queuedBuild{team, tp, b, func(ctx context.Context) { s.runBuild(ctx, team, tp, b, spec, force) }}:
		default:
			refused = errors.New("the build queue is full; try again later")
		}
	}
	t.mu.Unlock()
	if refused != nil {
		s.finishBuild(team, tp, b, "", "base", refused)
	}
	w.WriteHeader(http.StatusAccepted)
}

// runBuild is one queued build; ctx ends with the server.
func (s *Server) runBuild(ctx context.Context, team string, tp *template, b *tplBuild, spec *environment.Spec, force bool) {
	t := s.templates
	t.mu.Lock()
	b.Status, b.UpdatedAt = "building", time.Now().UTC()
	t.mu.Unlock()
	b.logs.add("info", "Building "+tp.Name+" with the environment builder")
	ctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	// Log carries every step header and command's output; of Progress only
	// the summary lines (cached, built) are new, its step lines repeat Log's.
	env, err := t.store.Build(ctx, spec, environment.BuildOptions{Progress: progressSummary{b.logs}, Log: b.logs, Force: force})
	step := ""
	if err != nil && t.ctx.Err() != nil {
		// Whatever the step said as it was killed, the reason is ours.
		s.log.Info("template build cancelled by the shutdown", "team", team, "template", tp.ID, "build", b.ID, "error", err)
		err = errBuildShutdown
	}
	if err != nil {
		var se *environment.StepError
		if errors.As(err, &se) {
			step = strconv.Itoa(se.Index + 1)
		} else {
			step = "base"
		}
		s.finishBuild(team, tp, b, "", step, err)
		return
	}
	t.mu.Lock()
	b.Workdir, b.User = env.Workdir, env.User
	t.mu.Unlock()
	s.finishBuild(team, tp, b, env.ID, "", nil)
}

func (s *Server) finishBuild(team string, tp *template, b *tplBuild, envID, step string, err error) {
	t := s.templates
	now := time.Now().UTC()
	t.mu.Lock()
	defer t.mu.Unlock()
	b.UpdatedAt, b.FinishedAt = now, &now
	if err != nil {
		b.Status, b.Reason, b.Step = "error", err.Error(), step
		b.logs.add("error", "Build failed: "+err.Error())
		args := []any{"team", team, "template", tp.ID, "build", b.ID, "step", step, "error", err}
		if pe := (*environment.PullError)(nil); errors.As(err, &pe) && errors.Unwrap(pe) != nil {
			// The operator's log has what the registry said; the tenant's
			// status only our reason.
			args = append(args, "detail", errors.Unwrap(pe).Error())
		}
		s.log.Warn("template build failed", args...)
	} else {
		b.Status, b.EnvID = "ready", envID
		for _, tg := range b.Tags {
			tp.Tags[tg] = &tplTag{BuildID: b.ID, CreatedAt: now}
		}
		tp.UpdatedAt = now
		b.logs.add("info", "Build finished: environment "+envID[:12])
		s.log.Info("template built", "team", team, "template", tp.ID, "build", b.ID, "environment", envID)
	}
	_ = t.save(team)
}

func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request) {
	tp, _, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	offset, _ := strconv.Atoi(r.URL.Query().Get("logsOffset"))
	s.templates.mu.Lock()
	b := tp.build(r.PathValue("buildID"))
	if b == nil {
		s.templates.mu.Unlock()
		writeError(w, http.StatusNotFound, "build %q of template %s not found", r.PathValue("buildID"), tp.ID)
		return
	}
	status, reason, step, logs := b.Status, b.Reason, b.Step, b.logs
	s.templates.mu.Unlock()
	entries := []logEntry{}
	if logs != nil { // nil for a build from before a restart: its log is in the store
		entries = logs.page(offset)
	}
	lines := make([]string, 0, len(entries))
	for _, e := range entries {
		lines = append(lines, e.Timestamp.Format(time.RFC3339)+" "+e.Message)
	}
	out := map[string]any{"templateID": tp.ID, "buildID": b.ID, "status": status, "logEntries": entries, "logs": lines}
	if status == "error" {
		out["reason"] = map[string]any{"message": reason, "step": step, "logEntries": []logEntry{}}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) buildLogs(w http.ResponseWriter, r *http.Request) {
	tp, _, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	offset, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	s.templates.mu.Lock()
	b := tp.build(r.PathValue("buildID"))
	s.templates.mu.Unlock()
	if b == nil {
		writeError(w, http.StatusNotFound, "build %q of template %s not found", r.PathValue("buildID"), tp.ID)
		return
	}
	entries := []logEntry{}
	if b.logs != nil {
		entries = b.logs.page(offset)
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": entries})
}

// templateJSON is E2B's Template (t.mu held).
func templateJSON(tp *template) map[string]any {
	var last *tplBuild
	for _, b := range tp.Builds {
		if b.Status == "ready" {
			last = b
		}
	}
	status, buildID, cpu, mem := "waiting", "", 2, 1024
	if len(tp.Builds) > 0 {
		status = tp.Builds[len(tp.Builds)-1].Status
	}
	if last != nil {
		buildID, cpu, mem = last.ID, max(last.CPUCount, 1), max(last.MemoryMB, 128)
	}
	return map[string]any{"templateID": tp.ID, "buildID": buildID, "cpuCount": cpu, "memoryMB": mem, "diskSizeMB": 0,
		"public": false, "aliases": []string{tp.Name}, "names": []string{tp.Name}, "createdAt": tp.CreatedAt, "updatedAt": tp.UpdatedAt,
		"createdBy": nil, "lastSpawnedAt": tp.SpawnedAt, "spawnCount": tp.Spawns, "buildCount": len(tp.Builds),
		"envdVersion": EnvdVersion, "buildStatus": status}
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	k := caller(r)
	s.templates.mu.Lock()
	out := []map[string]any{}
	for _, tp := range s.templates.load(k.Team) {
		out = append(out, templateJSON(tp))
	}
	s.templates.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	tp, _, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	s.templates.mu.Lock()
	defer s.templates.mu.Unlock()
	builds := []map[string]any{}
	for i := len(tp.Builds) - 1; i >= 0; i-- {
		b := tp.Builds[i]
		bj := map[string]any{"buildID": b.ID, "status": b.Status, "createdAt": b.CreatedAt, "updatedAt": b.UpdatedAt,
			"cpuCount": max(b.CPUCount, 1), "memoryMB": max(b.MemoryMB, 128), "envdVersion": EnvdVersion}
		if b.FinishedAt != nil {
			bj["finishedAt"] = b.FinishedAt
		}
		builds = append(builds, bj)
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": tp.ID, "public": false, "aliases": []string{tp.Name}, "names": []string{tp.Name},
		"createdAt": tp.CreatedAt, "updatedAt": tp.UpdatedAt, "lastSpawnedAt": tp.SpawnedAt, "spawnCount": tp.Spawns, "builds": builds})
}

// deleteTemplate forgets the template and removes its environment builds
// that nothing else holds (releaseBuilds): a build a live sandbox of the
// template runs on, or that another template (of any team: builds are
// content-addressed) or a store name points at, stays, and the log says
// which and why.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if s.deleteSnapshot(w, r) { // the SDK's deleteSnapshot (snapshots.go)
		return
	}
	tp, team, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	// Taken before the templates' lock, never while holding it.
	s.mu.Lock()
	live := 0
	for _, e := range s.sandboxes {
		if e.team == team && (e.template == tp.ID || e.template == tp.Name || strings.HasPrefix(e.template, tp.Name+":")) {
			live++
		}
	}
	s.mu.Unlock()
	t := s.templates
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range tp.Builds {
		if b.Status == "waiting" || b.Status == "building" {
			writeError(w, http.StatusConflict, "template %s has a build in progress; delete it when the build ends", tp.ID)
			return
		}
	}
	t.teams[team] = slices.DeleteFunc(t.load(team), func(x *template) bool { return x == tp })
	if err := t.save(team); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	removed, kept := t.releaseBuilds(team, tp, live > 0)
	files := t.releaseUploads(team, tp)
	s.log.Info("template deleted", "team", team, "template", tp.ID, "name", tp.Name,
		"builds_removed", removed, "builds_kept", kept, "files_removed", files)
	w.WriteHeader(http.StatusNoContent)
}

// releaseBuilds removes the environment builds of a deleted template
// (already out of its team's list; t.mu held) unless inUse (a live sandbox
// of the template), another template of any team, or a store name other
// than the template's own holds them. It returns what it removed and what
// it kept, with the reason.
func (t *templateStore) releaseBuilds(team string, tp *template, inUse bool) (removed, kept []string) {
	ids := map[string]bool{}
	for _, b := range tp.Builds {
		if b.EnvID != "" {
			ids[b.EnvID] = true
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if inUse {
		for id := range ids {
			kept = append(kept, id[:12]+": a live sandbox of the template may run on it")
		}
		return nil, kept
	}
	held := t.heldEnvIDs()
	names := t.store.Names()
	for id := range ids {
		why := ""
		if held[id] {
			why = "another template's build"
		}
		for n, nid := range names {
			if nid == id && n != envName(team, tp.Name) {
				why = "the environment name " + n + " points at it"
			}
		}
		if why != "" {
			kept = append(kept, id[:12]+": "+why)
			continue
		}
		if _, err := t.store.Remove(id); err != nil && !errors.Is(err, environment.ErrNotFound) {
			kept = append(kept, id[:12]+": "+err.Error())
			continue
		}
		removed = append(removed, id[:12])
	}
	slices.Sort(removed)
	slices.Sort(kept)
	return removed, kept
}

// heldEnvIDs is every environment build any team's template refers to
// (t.mu held): the loaded teams from memory, the others from disk.
func (t *templateStore) heldEnvIDs() map[string]bool {
	held := map[string]bool{}
	loaded := map[string]bool{}
	add := func(l []*template) {
		for _, tp := range l {
			for _, b := range tp.Builds {
				if b.EnvID != "" {
					held[b.EnvID] = true
				}
			}
		}
	}
	for team, l := range t.teams {
		loaded[filepath.Base(t.teamDir(team))] = true
		add(l)
	}
	ents, _ := os.ReadDir(t.dir)
	for _, e := range ents {
		if !e.IsDir() || loaded[e.Name()] {
			continue
		}
		var l []*template
		if raw, err := os.ReadFile(filepath.Join(t.dir, e.Name(), "templates.json")); err == nil && json.Unmarshal(raw, &l) == nil {
			add(l)
		}
	}
	return held
}

// templateAlias answers Template.exists. Another team's template of the
// same name does not exist for the caller: names are per team here.
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request) {
	k := caller(r)
	if name := r.PathValue("sub"); slices.Contains(templates, name) {
		// The server's own templates exist for every team (Template.exists
		// ("base")), as E2B's public ones do.
		writeJSON(w, http.StatusOK, map[string]any{"templateID": name, "public": true})
		return
	}
	s.templates.mu.Lock()
	tp := s.templates.find(k.Team, r.PathValue("sub"))
	s.templates.mu.Unlock()
	if tp == nil {
		writeError(w, http.StatusNotFound, "template %q not found", r.PathValue("sub"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": tp.ID, "public": false})
}

func (s *Server) assignTags(w http.ResponseWriter, r *http.Request) {
	k := caller(r)
	var req struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if !decode(w, r, &req, false) {
		return
	}
	name, tag, _ := strings.Cut(req.Target, ":")
	if tag == "" {
		tag = "default"
	}
	if len(req.Tags) == 0 || len(req.Tags) > 16 {
		writeError(w, http.StatusBadRequest, "give 1 to 16 tags")
		return
	}
	for _, tg := range req.Tags {
		if !tagRE.MatchString(tg) {
			writeError(w, http.StatusBadRequest, "tag %q: use letters, digits, '.', '-' and '_' (at most 63)", tg)
			return
		}
	}
	t := s.templates
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.find(k.Team, name)
	if tp == nil || tp.Tags[tag] == nil {
		writeError(w, http.StatusNotFound, "template %q has no build tagged %q", name, tag)
		return
	}
	if n := tp.tagsWith(req.Tags); n > maxTagsPerTemplate {
		writeError(w, http.StatusBadRequest, "template %s would have %d tags, at most %d: delete some (DELETE /templates/tags) first", name, n, maxTagsPerTemplate)
		return
	}
	id := tp.Tags[tag].BuildID
	now := time.Now().UTC()
	for _, tg := range req.Tags {
		tp.Tags[tg] = &tplTag{BuildID: id, CreatedAt: now}
	}
	if err := t.save(k.Team); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"tags": req.Tags, "buildID": id})
}

func (s *Server) deleteTags(w http.ResponseWriter, r *http.Request) {
	k := caller(r)
	var req struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if !decode(w, r, &req, false) {
		return
	}
	t := s.templates
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.find(k.Team, req.Name)
	if tp == nil {
		writeError(w, http.StatusNotFound, "template %q not found", req.Name)
		return
	}
	for _, tg := range req.Tags {
		if tp.Tags[tg] == nil {
			writeError(w, http.StatusNotFound, "template %q has no tag %q", req.Name, tg)
			return
		}
	}
	for _, tg := range req.Tags {
		delete(tp.Tags, tg)
	}
	if err := t.save(k.Team); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) templateTags(w http.ResponseWriter, r *http.Request) {
	tp, _, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	s.templates.mu.Lock()
	out := []map[string]any{}
	for tg, v := range tp.Tags {
		out = append(out, map[string]any{"tag": tg, "buildID": v.BuildID, "createdAt": v.CreatedAt})
	}
	s.templates.mu.Unlock()
	slices.SortFunc(out, func(a, b map[string]any) int { return strings.Compare(a["tag"].(string), b["tag"].(string)) })
	writeJSON(w, http.StatusOK, out)
}
