// Template builds: POST /v3/templates and its build request, turning the
// SDK's steps into an environment spec, and running a build to its end.

package e2bserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/environment"
)

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
