package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// An environment built for E2B is a template (E2B's template build API, as
// the npm SDK's Template.build drives it): it starts from
// code-interpreter-v1, the only template whose code interpreter answers
// run_code, and adds the spec's apt packages, its pip lock with hashes
// required, its files and env, and the sandbox contract's identity (the
// uid-1000 account named user, in group 100) and locale. The build runs in
// the API key's own team. Each build gets a tag of its own, so the
// environment name returned ("name:tag") pins that build: a later build
// under the same name never moves it.

// reconcileScript removes from the template's Python what the lock doesn't
// pin and the code interpreter doesn't need.
//
//go:embed reconcile.py
var reconcileScript []byte

// Where a build puts the lock and the script for the install step.
const (
	lockPath      = "/tmp/code-sandboxes-requirements.lock"
	reconcilePath = "/tmp/code-sandboxes-reconcile.py"
)

// Template build limits: polling interval and the longest build waited for.
const (
	buildPoll    = 500 * time.Millisecond
	buildTimeout = time.Hour
)

// BuildEnvironment implements driver.EnvironmentBuilder.
func (v Variant) BuildEnvironment(ctx context.Context, spec driver.Spec, envSpec any, force bool) (driver.Environment, error) {
	es, ok := envSpec.(*environment.Spec)
	if !ok || es == nil {
		return driver.Environment{}, fmt.Errorf("%w: no environment spec", sberr.ErrInvalidConfig)
	}
	c, err := resolve(spec)
	if err != nil {
		return driver.Environment{}, err
	}
	out := spec.BuildOutput
	if out == nil {
		out = io.Discard
	}
	return buildTemplate(ctx, api{c: c}, es, force, out)
}

// templateStep is E2B's TemplateStep.
type templateStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash,omitempty"`
	Force     bool     `json:"force"`
}

// templateBuildStart is E2B's TemplateBuildStartV2.
type templateBuildStart struct {
	FromTemplate string         `json:"fromTemplate"`
	Force        bool           `json:"force"`
	Steps        []templateStep `json:"steps"`
}

// upload is one copy step's archive.
type upload struct {
	hash    string
	archive []byte
}

// templatePlan maps an environment spec onto template steps.
func templatePlan(es *environment.Spec) (templateBuildStart, []upload, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: the e2b variant: "+format, append([]any{environment.ErrInvalidSpec}, a...)...)
	}
	switch {
	case es.Base.Host, es.Base.Tarball != "", es.Base.Image != "", es.Base.Debian != "":
		return templateBuildStart{}, nil, bad("an E2B template starts from %s (its code interpreter answers run_code); use base: {environment: python} (or any environment name, which means the same here)", DefaultTemplate)
	case len(es.Steps) > 0:
		return templateBuildStart{}, nil, bad("steps are not sent to E2B yet; use apt, pip, files and env")
	}
	lock, files, err := es.Contents()
	if err != nil {
		return templateBuildStart{}, nil, err
	}
	plan := templateBuildStart{FromTemplate: DefaultTemplate, Steps: []templateStep{}}
	var uploads []upload
	run := func(cmd string) {
		plan.Steps = append(plan.Steps, templateStep{Type: "RUN", Args: []string{cmd, "root"}})
	}
	copyFile := func(src, dest, mode string, content []byte) error {
		archive, err := tarGz(src, content)
		if err != nil {
			return err
		}
		// The hash names the archive in the template's file cache; ours
		// covers the step's text and the bytes, as the SDK's does.
		h := sha256.New()
		fmt.Fprintf(h, "COPY %s %s\x00%s\x00", src, dest, mode)
		h.Write(content)
		hash := hex.EncodeToString(h.Sum(nil))
		uploads = append(uploads, upload{hash: hash, archive: archive})
		plan.Steps = append(plan.Steps, templateStep{Type: "COPY", Args: []string{src, dest, "", mode}, FilesHash: hash})
		return nil
	}
	if len(es.Apt) > 0 {
		apt := append([]string(nil), es.Apt...)
		sort.Strings(apt)
		run("apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y --no-install-recommends " +
			strings.Join(apt, " ") + " && rm -rf /var/lib/apt/lists/*")
	}
	if lock != nil {
		// The template is reconciled to exactly the lock (uv pip sync
		// semantics): installed with hashes required (uv where the
		// template has it, pip otherwise), then what neither the lock nor
		// the code interpreter needs is removed (reconcile.py says why not
		// uv pip sync itself).
		if err := copyFile("requirements.lock", lockPath, "0644", lock); err != nil {
			return templateBuildStart{}, nil, err
		}
		if err := copyFile("reconcile.py", reconcilePath, "0644", reconcileScript); err != nil {
			return templateBuildStart{}, nil, err
		}
		index := ""
		if es.Pip.Index != "" {
			index = " --index-url " + shellQuote(es.Pip.Index)
		}
		run("set -e; export PIP_BREAK_SYSTEM_PACKAGES=1; " +
			"if command -v uv >/dev/null; then uv pip install --system --break-system-packages --no-cache --require-hashes -r " + lockPath + index + "; " +
			"else python3 -m pip install --no-cache-dir --require-hashes --no-input --disable-pip-version-check -r " + lockPath + index + "; fi; " +
			"python3 " + reconcilePath + " " + lockPath + "; rm -f " + lockPath + " " + reconcilePath)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for i, p := range paths {
		mode := "0644"
		for _, f := range es.Files {
			if f.Path == p && f.Mode != "" {
				m, _ := strconv.ParseUint(f.Mode, 8, 32)
				mode = fmt.Sprintf("%04o", m)
			}
		}
		if err := copyFile(fmt.Sprintf("files/%d/%s", i, path.Base(p)), p, mode, files[p]); err != nil {
			return templateBuildStart{}, nil, err
		}
	}
	// The sandbox contract's identity: E2B's templates run code as the
	// uid-1000 account; it must be named user and be in group 100.
	run(`set -e; getent group 100 >/dev/null || groupadd -g 100 users; ` +
		`u=$(getent passwd 1000 | cut -d: -f1); ` +
		`if [ -z "$u" ]; then useradd -u 1000 -g 100 -m -d /home/user -s /bin/bash user; ` +
		`elif [ "$u" != user ]; then usermod -l user "$u"; fi; usermod -g 100 user`)
	env := []string{"LANG", "C.UTF-8", "LC_ALL", "C.UTF-8"}
	keys := make([]string, 0, len(es.Env))
	for k := range es.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k, es.Env[k])
	}
	plan.Steps = append(plan.Steps, templateStep{Type: "ENV", Args: env})
	return plan, uploads, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// tarGz is a gzip'd tar of one file, with fixed times so the same content
// is the same archive.
func tarGz(name string, content []byte) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(content); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// buildTemplate runs the template build and follows it to the end.
func buildTemplate(ctx context.Context, a api, es *environment.Spec, force bool, out io.Writer) (driver.Environment, error) {
	plan, uploads, err := templatePlan(es)
	if err != nil {
		return driver.Environment{}, err
	}
	plan.Force = force
	var req struct {
		TemplateID string   `json:"templateID"`
		BuildID    string   `json:"buildID"`
		Tags       []string `json:"tags"`
	}
	// The build's own tag is chosen before E2B names the build: a random
	// one, as unguessable as the build id it will point at.
	tag := "cs-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	fmt.Fprintf(out, "environment %s: requesting an E2B template build (from %s)\n", es.Name, DefaultTemplate)
	if _, err := a.call(ctx, "request template build", http.MethodPost, "/v3/templates", "",
		map[string]any{"name": es.Name, "tags": []string{tag}, "cpuCount": 2, "memoryMB": 1024}, &req); err != nil {
		return driver.Environment{}, err
	}
	if req.TemplateID == "" || req.BuildID == "" || strings.ContainsAny(req.TemplateID+req.BuildID, "/?#%") {
		return driver.Environment{}, fmt.Errorf("request template build: the E2B API answered unusable ids %q, %q", req.TemplateID, req.BuildID)
	}
	fmt.Fprintf(out, "  template %s, build %s\n", req.TemplateID, req.BuildID)
	for _, u := range uploads {
		var link struct {
			Present bool   `json:"present"`
			URL     string `json:"url"`
		}
		if _, err := a.call(ctx, "template file link", http.MethodGet, "/templates/"+req.TemplateID+"/files/"+u.hash, "", nil, &link); err != nil {
			return driver.Environment{}, err
		}
		if link.Present {
			continue
		}
		if err := putArchive(ctx, link.URL, u.archive); err != nil {
			return driver.Environment{}, err
		}
	}
	if _, err := a.call(ctx, "start template build", http.MethodPost, "/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, "", plan, nil); err != nil {
		return driver.Environment{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	offset := 0
	for {
		var st struct {
			Status     string `json:"status"`
			LogEntries []struct {
				Level   string `json:"level"`
				Message string `json:"message"`
			} `json:"logEntries"`
			Reason *struct {
				Message string `json:"message"`
				Step    string `json:"step"`
			} `json:"reason"`
		}
		if _, err := a.call(ctx, "template build status", http.MethodGet,
			"/templates/"+req.TemplateID+"/builds/"+req.BuildID+"/status?logsOffset="+strconv.Itoa(offset), "", nil, &st); err != nil {
			return driver.Environment{}, err
		}
		offset += len(st.LogEntries)
		for _, e := range st.LogEntries {
			fmt.Fprintf(out, "  %s\n", clip(e.Message, 4096))
		}
		switch st.Status {
		case "ready", "error":
			if len(st.LogEntries) > 0 {
				continue // drain the log first, as the SDK does
			}
			if st.Status == "error" {
				msg, step := "no reason given", ""
				if st.Reason != nil {
					msg, step = st.Reason.Message, st.Reason.Step
				}
				return driver.Environment{}, fmt.Errorf("%w: E2B template %s build %s failed at step %s: %s", environment.ErrBuildFailed, es.Name, req.BuildID, step, clip(msg, 4096))
			}
			fmt.Fprintf(out, "environment %s: built E2B template %s build %s; Environment %s:%s pins it\n", es.Name, req.TemplateID, req.BuildID, es.Name, tag)
			return driver.Environment{Name: es.Name + ":" + tag, Variant: "e2b", BuildID: req.BuildID,
				Description: "E2B template " + req.TemplateID + " (" + es.Name + ")"}, nil
		case "building", "waiting":
		default:
			return driver.Environment{}, fmt.Errorf("template build status: unknown status %q", st.Status)
		}
		select {
		case <-ctx.Done():
			return driver.Environment{}, fmt.Errorf("waiting for E2B template build %s: %w", req.BuildID, ctx.Err())
		case <-time.After(buildPoll):
		}
	}
}

// putArchive uploads a copy step's archive to the URL the API gave (at
// E2B, a presigned storage URL: no API key goes there).
func putArchive(ctx context.Context, url string, archive []byte) error {
	if !strings.HasPrefix(url, "https://") && !strings.HasPrefix(url, "http://") {
		return fmt.Errorf("template file upload: the E2B API gave an unusable URL %q", clip(url, 200))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(archive))
	if err != nil {
		return fmt.Errorf("template file upload: %w", err)
	}
	req.ContentLength = int64(len(archive))
	resp, err := apiHTTP.Do(req)
	if err != nil {
		return fmt.Errorf("template file upload: %w: %w", sberr.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("template file upload: %s", resp.Status)
	}
	return nil
}

// maxListedTemplates bounds the per-template tag calls of a listing.
const maxListedTemplates = 100

// ourTemplates lists the team's templates that code-sandboxes built: those
// with a "cs-" build tag, each as name:tag of its newest such build.
func ourTemplates(ctx context.Context, a api) ([]driver.Environment, error) {
	var list []struct {
		TemplateID string   `json:"templateID"`
		Names      []string `json:"names"`
		Aliases    []string `json:"aliases"`
	}
	if _, err := a.call(ctx, "list templates", http.MethodGet, "/templates", "", nil, &list); err != nil {
		return nil, err
	}
	var out []driver.Environment
	for i, t := range list {
		if i >= maxListedTemplates {
			break
		}
		name := t.TemplateID
		if len(t.Names) > 0 {
			name = t.Names[0]
		} else if len(t.Aliases) > 0 {
			name = t.Aliases[0]
		}
		var tags []struct {
			Tag       string    `json:"tag"`
			BuildID   string    `json:"buildID"`
			CreatedAt time.Time `json:"createdAt"`
		}
		if _, err := a.call(ctx, "template tags", http.MethodGet, "/templates/"+t.TemplateID+"/tags", "", nil, &tags); err != nil {
			return out, err
		}
		newest := -1
		for j, tg := range tags {
			if strings.HasPrefix(tg.Tag, "cs-") && (newest < 0 || tg.CreatedAt.After(tags[newest].CreatedAt)) {
				newest = j
			}
		}
		if newest >= 0 {
			out = append(out, driver.Environment{Name: name + ":" + tags[newest].Tag, Variant: "e2b", BuildID: tags[newest].BuildID,
				Description: "E2B template " + t.TemplateID + " built by code-sandboxes"})
		}
	}
	return out, nil
}
