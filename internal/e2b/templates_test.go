package e2b_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/environments"
)

// E2B's template API answers (spec/openapi.yml of e2b-dev/E2B, as the npm
// SDK's Template.build reads them): TemplateRequestResponseV3,
// TemplateBuildFileUpload, TemplateBuildInfo with BuildLogEntry and
// BuildStatusReason.
const (
	fixtureTemplateRequest = `{"templateID":"kx3b8z1q9wv7ptm2hd4e","buildID":"7d0c7b52-0f5b-4a59-9a3e-6f1ad2f0c3b1","public":false,"aliases":["fixture-env"],"names":["fixture-env"],"tags":["cs-x"]}`
	fixtureStatusBuilding  = `{"logs":["2026-08-21T10:00:00Z [1/6] RUN apt-get update"],"logEntries":[{"timestamp":"2026-08-21T10:00:00.000Z","level":"info","message":"[1/6] RUN apt-get update","step":"1"},{"timestamp":"2026-08-21T10:00:01.000Z","level":"info","message":"Setting up tree (2.1.0-1) ...","step":"1"}],"templateID":"kx3b8z1q9wv7ptm2hd4e","buildID":"7d0c7b52-0f5b-4a59-9a3e-6f1ad2f0c3b1","status":"building"}`
	fixtureStatusReady     = `{"logs":[],"logEntries":[],"templateID":"kx3b8z1q9wv7ptm2hd4e","buildID":"7d0c7b52-0f5b-4a59-9a3e-6f1ad2f0c3b1","status":"ready"}`
	fixtureStatusError     = `{"logs":[],"logEntries":[],"templateID":"kx3b8z1q9wv7ptm2hd4e","buildID":"7d0c7b52-0f5b-4a59-9a3e-6f1ad2f0c3b1","status":"error","reason":{"message":"failed to run command 'pip install': exit status 1","step":"3","logEntries":[]}}`
)

func writeSpec(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	lock := "cs-locked==1.0 \\\n    --hash=sha256:" + strings.Repeat("a", 64) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "requirements.lock"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := `name: fixture-env
base: {environment: python}
apt: [tree]
pip: {lock: requirements.lock, index: "http://127.0.0.1:9/simple"}
files:
  - {path: /opt/app/config.toml, content: "answer = 42\n", mode: "0600"}
env: {APP_MODE: test}
`
	if err := os.WriteFile(filepath.Join(dir, "env.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "env.yaml")
}

// TestTemplateBuildFixture: an environment spec becomes E2B template steps
// on code-interpreter-v1 with the request bodies E2B's API takes; copy
// archives are uploaded where the API says (without the API key), the
// status is polled with logsOffset and its log entries reach BuildOutput,
// and the name returned pins this build by a tag of its own.
func TestTemplateBuildFixture(t *testing.T) {
	f := newFake(t)
	var polls atomic.Int32
	uploads := map[string][]byte{}
	var uploadKey []string
	f.override = func(w http.ResponseWriter, r *http.Request, body string) bool {
		js := func(status int, b string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, b)
		}
		switch {
		case r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/upload/"):
			uploads[strings.TrimPrefix(r.URL.Path, "/upload/")] = []byte(body)
			uploadKey = append(uploadKey, r.Header.Get("X-API-Key"))
			w.WriteHeader(http.StatusOK)
		case r.Header.Get("X-API-Key") != testKey:
			return false
		case r.Method == "POST" && r.URL.Path == "/v3/templates":
			js(http.StatusAccepted, fixtureTemplateRequest)
		case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/templates/kx3b8z1q9wv7ptm2hd4e/files/"):
			hash := strings.TrimPrefix(r.URL.Path, "/templates/kx3b8z1q9wv7ptm2hd4e/files/")
			js(http.StatusCreated, `{"present":false,"url":"`+f.srv.URL+`/upload/`+hash+`?X-Amz-Signature=abc"}`)
		case r.Method == "POST" && r.URL.Path == "/v2/templates/kx3b8z1q9wv7ptm2hd4e/builds/7d0c7b52-0f5b-4a59-9a3e-6f1ad2f0c3b1":
			w.WriteHeader(http.StatusAccepted)
		case r.Method == "GET" && r.URL.Path == "/templates/kx3b8z1q9wv7ptm2hd4e/builds/7d0c7b52-0f5b-4a59-9a3e-6f1ad2f0c3b1/status":
			if polls.Add(1) == 1 {
				if r.URL.Query().Get("logsOffset") != "0" {
					t.Errorf("first poll logsOffset %q", r.URL.Query().Get("logsOffset"))
				}
				js(http.StatusOK, fixtureStatusBuilding)
			} else {
				if r.URL.Query().Get("logsOffset") != "2" {
					t.Errorf("second poll logsOffset %q, want 2", r.URL.Query().Get("logsOffset"))
				}
				js(http.StatusOK, fixtureStatusReady)
			}
		default:
			return false
		}
		return true
	}
	cfg := f.config()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := environments.BuildFile(ctx, writeSpec(t), environments.Options{Config: &cfg, Progress: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if b.ID != "7d0c7b52-0f5b-4a59-9a3e-6f1ad2f0c3b1" || !strings.HasPrefix(b.Name, "fixture-env:cs-") {
		t.Errorf("build: id %q name %q", b.ID, b.Name)
	}
	if !strings.Contains(out.String(), "Setting up tree") {
		t.Errorf("the build's log entries did not reach BuildOutput:\n%s", out.String())
	}

	_, reqBody := f.find("POST", "/v3/templates")
	var req struct {
		Name     string   `json:"name"`
		Tags     []string `json:"tags"`
		CPUCount int      `json:"cpuCount"`
		MemoryMB int      `json:"memoryMB"`
	}
	if err := json.Unmarshal([]byte(reqBody), &req); err != nil || req.Name != "fixture-env" || len(req.Tags) != 1 || b.Name != "fixture-env:"+req.Tags[0] || req.CPUCount == 0 || req.MemoryMB == 0 {
		t.Errorf("POST /v3/templates body %s", reqBody)
	}
	_, startBody := f.find("POST", "/v2/templates/kx3b8z1q9wv7ptm2hd4e/builds/7d0c7b52-0f5b-4a59-9a3e-6f1ad2f0c3b1")
	var start struct {
		FromTemplate string `json:"fromTemplate"`
		FromImage    string `json:"fromImage"`
		Force        bool   `json:"force"`
		Steps        []struct {
			Type      string   `json:"type"`
			Args      []string `json:"args"`
			FilesHash string   `json:"filesHash"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(startBody), &start); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, s := range start.Steps {
		types = append(types, s.Type)
	}
	if start.FromTemplate != "code-interpreter-v1" || start.FromImage != "" || strings.Join(types, " ") != "RUN COPY COPY RUN COPY RUN ENV" {
		t.Fatalf("start body: %s", startBody)
	}
	if !strings.Contains(start.Steps[0].Args[0], "apt-get install -y --no-install-recommends tree") || start.Steps[0].Args[1] != "root" {
		t.Errorf("apt step: %v", start.Steps[0].Args)
	}
	if a := start.Steps[2].Args; a[0] != "reconcile.py" || a[1] != "/tmp/code-sandboxes-reconcile.py" {
		t.Errorf("reconcile script copy step: %v", a)
	}
	if pip := start.Steps[3].Args[0]; !strings.Contains(pip, "--require-hashes") || !strings.Contains(pip, "--index-url 'http://127.0.0.1:9/simple'") ||
		!strings.Contains(pip, "python3 /tmp/code-sandboxes-reconcile.py /tmp/code-sandboxes-requirements.lock") || !strings.Contains(pip, "uv pip install --system") {
		t.Errorf("pip step: %v", start.Steps[3].Args)
	}
	if a := start.Steps[4].Args; a[1] != "/opt/app/config.toml" || a[3] != "0600" {
		t.Errorf("file copy step: %v", a)
	}
	if !strings.Contains(start.Steps[5].Args[0], "usermod -l user") || !strings.Contains(start.Steps[5].Args[0], "usermod -g 100 user") {
		t.Errorf("identity step: %v", start.Steps[5].Args)
	}
	if env := strings.Join(start.Steps[6].Args, " "); env != "LANG C.UTF-8 LC_ALL C.UTF-8 APP_MODE test" {
		t.Errorf("env step: %q", env)
	}
	// Each copy step's archive arrived under its hash, holding the file.
	for _, i := range []int{1, 2, 4} {
		s := start.Steps[i]
		raw, ok := uploads[s.FilesHash]
		if !ok {
			t.Fatalf("step %d: no upload for hash %s", i, s.FilesHash)
		}
		gz, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		h, err := tar.NewReader(gz).Next()
		if err != nil || h.Name != s.Args[0] {
			t.Errorf("step %d: archive entry %v %v, want %s", i, h, err, s.Args[0])
		}
	}
	for _, k := range uploadKey {
		if k != "" {
			t.Error("the API key was sent to the upload URL")
		}
	}

	// A failed build: ErrBuildFailed with E2B's reason and step.
	polls.Store(10)
	f.override = func(w http.ResponseWriter, r *http.Request, body string) bool {
		switch {
		case r.URL.Path == "/v3/templates":
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, fixtureTemplateRequest)
		case strings.Contains(r.URL.Path, "/files/"):
			_, _ = io.WriteString(w, `{"present":true}`)
		case strings.HasSuffix(r.URL.Path, "/status"):
			_, _ = io.WriteString(w, fixtureStatusError)
		case strings.HasPrefix(r.URL.Path, "/v2/templates/"):
			w.WriteHeader(http.StatusAccepted)
		default:
			return false
		}
		return true
	}
	_, err = environments.BuildFile(ctx, writeSpec(t), environments.Options{Config: &cfg})
	if !errors.Is(err, environments.ErrBuildFailed) || !strings.Contains(err.Error(), "step 3") || !strings.Contains(err.Error(), "failed to run command 'pip install'") {
		t.Errorf("failed build: %v", err)
	}

	// A base E2B can't start from is refused before any call.
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "s.yaml"), []byte("name: x\nbase: {debian: bookworm}\n"), 0o644)
	if _, err := environments.BuildFile(ctx, filepath.Join(dir, "s.yaml"), environments.Options{Config: &cfg}); !errors.Is(err, environments.ErrInvalidSpec) || !strings.Contains(err.Error(), "code-interpreter-v1") {
		t.Errorf("debian base on e2b: %v", err)
	}
}
