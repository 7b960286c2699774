package e2bserver

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/testpypi"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

const otherKey = "e2b_fedcba9876543210fedcba9876543210fedcba98"

// needPython is the default environment store with the built-in python
// environment built (what template builds start from).
func needPython(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds environments")
	}
	_, err := exec.LookPath("mmdebstrap")
	sandboxestest.Require(t, os.Geteuid() == 0 && err == nil, "template builds need root and mmdebstrap (make deps)")
	st, err := environment.Open("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if _, err := st.Ensure(ctx, "python", environment.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
}

// freshTeam is a team name of this test alone: template state lives in
// the machine's environment store, beside the python build the tests share.
func freshTeam(t *testing.T) string {
	team := "test-" + randomID(12)
	t.Cleanup(func() {
		st, err := environment.Open("")
		if err != nil {
			return
		}
		// The team's environment builds too: each is a copy of the python
		// rootfs, and names are per team, so no other test shares them.
		builds, _ := st.List()
		for _, b := range builds {
			if strings.HasSuffix(b.Description, " of team "+team) {
				_, _ = st.Remove(b.ID)
			}
		}
		ts := &templateStore{dir: filepath.Join(st.Dir, "e2b-templates")}
		_ = os.RemoveAll(ts.teamDir(team))
	})
	return team
}

func tarGzOf(t *testing.T, files map[string]string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(content))
	}
	_ = tw.Close()
	_ = gz.Close()
	return buf.Bytes()
}

type buildStatusJSON struct {
	TemplateID string `json:"templateID"`
	BuildID    string `json:"buildID"`
	Status     string `json:"status"`
	LogEntries []struct {
		Timestamp time.Time `json:"timestamp"`
		Level     string    `json:"level"`
		Message   string    `json:"message"`
	} `json:"logEntries"`
	Logs   []string `json:"logs"`
	Reason *struct {
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"reason"`
}

// waitBuild polls the status endpoint as the SDK does, with logsOffset,
// and returns the last status and every log line.
func waitBuild(t *testing.T, base, key, tpl, build string) (buildStatusJSON, []string) {
	t.Helper()
	var lines []string
	deadline := time.Now().Add(15 * time.Minute)
	for time.Now().Before(deadline) {
		var st buildStatusJSON
		resp := call(t, "GET", base+"/templates/"+tpl+"/builds/"+build+"/status?logsOffset="+strconv.Itoa(len(lines)), key, "", nil, &st)
		if resp.StatusCode != 200 {
			t.Fatalf("status: %d", resp.StatusCode)
		}
		for _, e := range st.LogEntries {
			lines = append(lines, e.Message)
		}
		if (st.Status == "ready" || st.Status == "error") && len(st.LogEntries) == 0 {
			return st, lines
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the build did not finish")
	return buildStatusJSON{}, nil
}

// TestTemplateAPI drives E2B's template API with the bytes the npm SDK's
// Template.build sends: request a build, upload a copy step's files to the
// signed URL, start the build, poll the status with log offsets, create a
// sandbox on the template and run code that sees the files, env and run
// step's output. Another team sees none of it; unsupported steps fail with
// the reason at their step; a server without --template-builds refuses.
func TestTemplateAPI(t *testing.T) {
	needSandboxes(t)
	needPython(t)
	a, b := freshTeam(t), freshTeam(t)
	_, base := testServer(t, Options{TemplateBuilds: true, Keys: []Key{{Key: testKey, Team: a}, {Key: otherKey, Team: b}}})

	var req struct {
		TemplateID string   `json:"templateID"`
		BuildID    string   `json:"buildID"`
		Names      []string `json:"names"`
		Tags       []string `json:"tags"`
	}
	if resp := call(t, "POST", base+"/v3/templates", testKey, `{"name":"api-test:v1","cpuCount":2,"memoryMB":1024}`, nil, &req); resp.StatusCode != 202 {
		t.Fatalf("POST /v3/templates: %d", resp.StatusCode)
	}
	if req.TemplateID == "" || len(req.BuildID) != 36 || req.Names[0] != "api-test" || req.Tags[0] != "v1" {
		t.Fatalf("request build answer: %+v", req)
	}
	tpl := base + "/templates/" + req.TemplateID

	// Files by hash: not present, upload to the signed URL, then present.
	hash := strings.Repeat("ab", 32)
	var link struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	call(t, "GET", tpl+"/files/"+hash, testKey, "", nil, &link)
	if link.Present || link.URL == "" {
		t.Fatalf("file link: %+v", link)
	}
	archive := tarGzOf(t, map[string]string{"app/hello.txt": "hello from the template\n"})
	put := func(u string) int {
		r, _ := http.NewRequest("PUT", u, bytes.NewReader(archive))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := put(strings.Replace(link.URL, "signature=", "signature=00", 1)); st != 403 {
		t.Errorf("upload with a forged signature: %d, want 403", st)
	}
	if st := put(strings.Replace(link.URL, hash, strings.Repeat("cd", 32), 1)); st != 403 {
		t.Errorf("upload to another hash with this signature: %d, want 403", st)
	}
	if st := put(link.URL); st != 200 {
		t.Fatalf("upload: %d", st)
	}
	call(t, "GET", tpl+"/files/"+hash, testKey, "", nil, &link)
	if !link.Present {
		t.Error("after the upload the file is not present")
	}

	// Team b can't see or touch team a's template.
	wantError(t, "GET", tpl+"/files/"+hash, otherKey, "", 404, "not found")
	wantError(t, "GET", tpl, otherKey, "", 404, "not found")
	wantError(t, "POST", base+"/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, otherKey, `{}`, 404, "not found")
	wantError(t, "GET", base+"/templates/aliases/api-test", otherKey, "", 404, "not found")
	// The server's own templates exist for everyone (Template.exists('base')).
	if resp := call(t, "GET", base+"/templates/aliases/base", otherKey, "", nil, nil); resp.StatusCode != 200 {
		t.Errorf("exists(base): %d", resp.StatusCode)
	}

	body := `{"fromTemplate":"code-interpreter-v1","force":false,"steps":[
		{"type":"ENV","args":["GREETING","hi"],"force":false},
		{"type":"WORKDIR","args":["/srv"],"force":false},
		{"type":"COPY","args":["app","/srv/app","",""],"filesHash":"` + hash + `","force":false},
		{"type":"RUN","args":["echo \"$GREETING $(id -u)\" > /srv/ran && echo step-output-marker","root"],"force":false}]}`
	if resp := call(t, "POST", base+"/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, testKey, body, nil, nil); resp.StatusCode != 202 {
		t.Fatalf("start build: %d", resp.StatusCode)
	}
	wantError(t, "POST", base+"/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, testKey, body, 409, "already started")
	// Triggered is building for E2B's SDK (buildInBackground then
	// getBuildStatus), queued or not.
	var early buildStatusJSON
	call(t, "GET", base+"/templates/"+req.TemplateID+"/builds/"+req.BuildID+"/status", testKey, "", nil, &early)
	if early.Status == "waiting" {
		t.Errorf("a triggered build reports %q", early.Status)
	}
	st, logs := waitBuild(t, base, testKey, req.TemplateID, req.BuildID)
	if st.Status != "ready" {
		t.Fatalf("build: %s %+v\n%s", st.Status, st.Reason, strings.Join(logs, "\n"))
	}
	if !strings.Contains(strings.Join(logs, "\n"), "step-output-marker") {
		t.Errorf("the run step's output is not in the streamed log:\n%s", strings.Join(logs, "\n"))
	}

	// A sandbox on it, by name and tag: the files, the env and the run
	// step's result are there.
	var sb sandboxJSON
	if resp := call(t, "POST", base+"/sandboxes", testKey, `{"templateID":"api-test:v1","timeout":120}`, nil, &sb); resp.StatusCode != 201 {
		t.Fatalf("create on the template: %d", resp.StatusCode)
	}
	defer call(t, "DELETE", base+"/sandboxes/"+sb.SandboxID, testKey, "", nil, nil)
	run := func(sb sandboxJSON, code string) string {
		r, _ := http.NewRequest("POST", base+"/execute", strings.NewReader(`{"code":`+strconv.Quote(code)+`}`))
		r.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		r.Header.Set("E2b-Sandbox-Port", "49999")
		r.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		r.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return string(out)
	}
	if out := run(sb, "import os\nprint(open('/srv/app/hello.txt').read().strip(), '|', open('/srv/ran').read().strip(), '|', os.environ.get('GREETING'))"); !strings.Contains(out, "hello from the template | hi 0 | hi") {
		t.Errorf("code in the template's sandbox: %s", out)
	}

	// Rebuild under the same name and tag with other steps: new sandboxes
	// get the new build, the running one keeps the build it pinned.
	first := req.BuildID
	call(t, "POST", base+"/v3/templates", testKey, `{"name":"api-test","tags":["v1"]}`, nil, &req)
	call(t, "POST", base+"/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, testKey, `{"fromTemplate":"base","steps":[{"type":"RUN","args":["mkdir -p /srv && echo second > /srv/ran"]}]}`, nil, nil)
	if st, logs := waitBuild(t, base, testKey, req.TemplateID, req.BuildID); st.Status != "ready" {
		t.Fatalf("second build: %s %+v\n%s", st.Status, st.Reason, strings.Join(logs, "\n"))
	}
	var sb2 sandboxJSON
	var raw json.RawMessage
	if resp := call(t, "POST", base+"/sandboxes", testKey, `{"templateID":"api-test:v1","timeout":120}`, nil, &raw); resp.StatusCode != 201 {
		t.Fatalf("create on the rebuilt template: %d %s", resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &sb2); err != nil {
		t.Fatal(err)
	}
	defer call(t, "DELETE", base+"/sandboxes/"+sb2.SandboxID, testKey, "", nil, nil)
	if out := run(sb2, "print(open('/srv/ran').read().strip())"); !strings.Contains(out, "second") {
		t.Errorf("a new sandbox after the rebuild: %s", out)
	}
	if out := run(sb, "print(open('/srv/ran').read().strip())"); !strings.Contains(out, "hi 0") {
		t.Errorf("the running sandbox moved with the rebuild: %s", out)
	}
	second := req.BuildID
	wantError(t, "POST", base+"/sandboxes", otherKey, `{"templateID":"api-test"}`, 400, "unknown")

	// Listing, aliases, tags.
	var list []map[string]any
	call(t, "GET", base+"/templates", testKey, "", nil, &list)
	if len(list) != 1 || list[0]["templateID"] != req.TemplateID || list[0]["buildID"] != second || list[0]["spawnCount"] != 2.0 {
		t.Errorf("list: %v", list)
	}
	call(t, "GET", base+"/templates", otherKey, "", nil, &list)
	if len(list) != 0 {
		t.Errorf("team b lists team a's templates: %v", list)
	}
	if resp := call(t, "GET", base+"/templates/aliases/api-test", testKey, "", nil, nil); resp.StatusCode != 200 {
		t.Errorf("alias exists: %d", resp.StatusCode)
	}
	if resp := call(t, "POST", base+"/templates/tags", testKey, `{"target":"api-test:v1","tags":["prod"]}`, nil, nil); resp.StatusCode != 201 {
		t.Errorf("assign tags: %d", resp.StatusCode)
	}
	// The build the tag left still exists and is listed among the builds.
	var withBuilds struct {
		Builds []struct{ BuildID, Status string }
	}
	call(t, "GET", tpl, testKey, "", nil, &withBuilds)
	if len(withBuilds.Builds) != 2 || withBuilds.Builds[1].BuildID != first || withBuilds.Builds[0].BuildID != second {
		t.Errorf("template builds, newest first: %+v", withBuilds.Builds)
	}
	var tags []map[string]any
	call(t, "GET", tpl+"/tags", testKey, "", nil, &tags)
	if len(tags) != 2 || tags[0]["tag"] != "prod" || tags[0]["buildID"] != second {
		t.Errorf("tags: %v", tags)
	}

	// Refused: a start command with a NUL, an unknown step type, a COPY whose
	// files were never uploaded; each fails the build with the reason at
	// its step (the SDK maps the step to the caller's line).
	for _, c := range []struct{ body, step, want string }{
		{`{"fromTemplate":"base","startCmd":"python -m http.server\u0000","readyCmd":"sleep 1"}`, "finalize", "start and ready commands"},
		{`{"fromTemplate":"base","steps":[{"type":"ENV","args":["A","b"]},{"type":"ADD","args":["x"]}]}`, "2", "not supported"},
		{`{"fromTemplate":"base","steps":[{"type":"COPY","args":["x","/x","",""],"filesHash":"` + strings.Repeat("0", 64) + `"}]}`, "1", "were not uploaded"},
		{`{"fromImageRegistry":{"type":"registry","username":"u","password":"p"},"fromImage":"x/y"}`, "base", "not supported"},
		{`{"fromTemplate":"no-such-template"}`, "base", "not found"},
		// E2B's wording (its SDK's runCmd test matches it).
		{`{"fromTemplate":"base","steps":[{"type":"RUN","args":["whoami","root123"]}]}`, "1", "failed to run command 'whoami': command failed: unauthenticated: invalid username: 'root123'"},
	} {
		call(t, "POST", base+"/v3/templates", testKey, `{"name":"api-test-refused"}`, nil, &req)
		call(t, "POST", base+"/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, testKey, c.body, nil, nil)
		st, _ := waitBuild(t, base, testKey, req.TemplateID, req.BuildID)
		if st.Status != "error" || st.Reason == nil || st.Reason.Step != c.step || !strings.Contains(st.Reason.Message, c.want) {
			t.Errorf("%s: status %s reason %+v; want error at step %s mentioning %q", c.body, st.Status, st.Reason, c.step, c.want)
		}
	}

	if resp := call(t, "DELETE", tpl, testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Errorf("delete: %d", resp.StatusCode)
	}
	if resp := call(t, "GET", base+"/templates/aliases/api-test", testKey, "", nil, nil); resp.StatusCode != 404 {
		t.Errorf("alias after delete: %d", resp.StatusCode)
	}
	if resp := call(t, "DELETE", base+"/templates/"+req.TemplateID, testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Errorf("delete: %d", resp.StatusCode)
	}
}

// TestTemplateBuildsOff: without TemplateBuilds a server runs nobody's
// build steps, and says how to turn them on.
func TestTemplateBuildsOff(t *testing.T) {
	_, base := testServer(t, Options{})
	wantError(t, "POST", base+"/v3/templates", testKey, `{"name":"x"}`, 403, "--template-builds")
	var list []any
	if resp := call(t, "GET", base+"/templates", testKey, "", nil, &list); resp.StatusCode != 200 {
		t.Errorf("list: %d", resp.StatusCode)
	}
}

// TestOfficialJSSDKTemplate: the official npm SDK's Template builder
// against serve (e2e/e2bjs/template.test.mjs): apt, pip (from a loopback
// index), copy and run steps; a sandbox on the template runs code that
// sees all of them; a rebuild of the same steps is the cached build and
// leaves the running sandbox alone; list and delete; an unsupported step
// is refused with the reason.
func TestOfficialJSSDKTemplate(t *testing.T) {
	needSandboxes(t)
	needPython(t)
	node, npm := needNode(t)
	npmCI(t, npm)
	wheel := testpypi.Wheel(t, "cs_tpl", "1.0", "cs_tpl", "VALUE = 'from-pip'\n")
	index := testpypi.Serve(t, "cs-tpl", testpypi.FileName("cs_tpl", "1.0"), wheel)
	_, url := testServer(t, Options{TemplateBuilds: true, TemplateLoopback: []int{testpypi.Port(t, index)},
		Keys: []Key{{Key: testKey, Team: freshTeam(t)}}})

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep := runNodeScript(ctx, t, node, "template.test.mjs", url, "PIP_INDEX="+index)
	step := func(name string, v any) {
		t.Helper()
		raw := rep.Steps[name]
		var thrown struct{ Thrown, Message string }
		_ = json.Unmarshal(raw, &thrown)
		if thrown.Thrown != "" && name != "refused" {
			t.Fatalf("step %s threw %s: %s", name, thrown.Thrown, thrown.Message)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("step %s: %v: %s", name, err, raw)
		}
	}
	var build struct {
		TemplateID, BuildID, Name string
		LogLines                  int
		SawApt, SawPip            bool
	}
	step("build", &build)
	if build.TemplateID == "" || build.BuildID == "" || build.LogLines == 0 || !build.SawApt || !build.SawPip {
		t.Errorf("build: %+v (want ids, and apt's and pip's output among the streamed logs)", build)
	}
	var exists struct{ Mine, Other bool }
	step("exists", &exists)
	if !exists.Mine || exists.Other {
		t.Errorf("exists: %+v", exists)
	}
	var run struct {
		Stdout, Tree string
		Error        *string
	}
	step("runCode", &run)
	if want := "from-pip | hello from a copy step | built as root | set-by-env"; !strings.Contains(run.Stdout, want) || run.Error != nil {
		t.Errorf("code on the template: %+v; want %q", run, want)
	}
	if !strings.HasPrefix(run.Tree, "tree v") {
		t.Errorf("the apt package is not in the sandbox: %q", run.Tree)
	}
	var rebuild struct{ BuildID string }
	step("rebuild", &rebuild)
	if rebuild.BuildID == "" || rebuild.BuildID == build.BuildID {
		t.Errorf("rebuild: %+v", rebuild)
	}
	var list struct {
		Status    int
		Templates []map[string]any
	}
	step("list", &list)
	if list.Status != 200 || len(list.Templates) != 1 || list.Templates[0]["templateID"] != build.TemplateID {
		t.Errorf("list: %+v", list)
	}
	var still string
	step("sandboxStillRuns", &still)
	if still != "2" {
		t.Errorf("the sandbox on the first build after a rebuild: %q", still)
	}
	var del struct {
		Status      int
		ExistsAfter bool
	}
	step("delete", &del)
	if del.Status != 204 || del.ExistsAfter {
		t.Errorf("delete: %+v", del)
	}
	var started struct {
		Status     string
		Error      *string
		LogsStatus int
		Logs       []string
	}
	step("startReady", &started)
	if started.Status != "200" || started.Error != nil || started.LogsStatus != 200 || !slices.Contains(started.Logs, "service up as 1000") {
		t.Errorf("start and ready commands: %+v; want the service answering, started as uid 1000, its line in the logs", started)
	}
	var fails struct {
		Message       string
		Before, After int
	}
	step("startFails", &fails)
	if !strings.Contains(fails.Message, "start command exited with code 3") || !strings.Contains(fails.Message, "boom") || fails.After != fails.Before {
		t.Errorf("a failing start command: %+v; want create to fail with the reason and no sandbox left", fails)
	}
	var refused struct{ Thrown, Message string }
	step("refused", &refused)
	if refused.Thrown != "BuildError" || !strings.Contains(refused.Message, "fromImageRegistry") {
		t.Errorf("an unsupported step: %+v; want BuildError with the reason", refused)
	}
}

// TestTemplateRestart: a build a restart cut short comes back failed with
// the reason, and its tag never points at it; finished builds and tags
// survive.
func TestTemplateRestart(t *testing.T) {
	dir := t.TempDir()
	a, err := newTemplates(dir, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	a.mu.Lock()
	a.teams["t"] = []*template{{ID: "tpl1", Name: "n", CreatedAt: now, UpdatedAt: now,
		Builds: []*tplBuild{{ID: "b-ready", EnvID: strings.Repeat("a", 64), Status: "ready", Tags: []string{"default"}},
			{ID: "b-cut", Status: "building", Tags: []string{"default"}}},
		Tags: map[string]*tplTag{"default": {BuildID: "b-ready", CreatedAt: now}}}}
	if err := a.save("t"); err != nil {
		t.Fatal(err)
	}
	a.mu.Unlock()

	b, err := newTemplates(dir, true, nil) // the restarted server
	if err != nil {
		t.Fatal(err)
	}
	_, envID, err := b.resolve("t", "n", false)
	if err != nil || envID != strings.Repeat("a", 64) {
		t.Errorf("after a restart the name resolves to %q, %v; want the finished build", envID, err)
	}
	b.mu.Lock()
	cut := b.find("t", "n").build("b-cut")
	b.mu.Unlock()
	if cut.Status != "error" || !strings.Contains(cut.Reason, "restarted") {
		t.Errorf("the interrupted build: %+v", cut)
	}
}

// TestDeleteTemplateReleasesBuilds: deleting a template removes its
// environment builds that nothing else holds, and keeps (saying why) one
// another team's template shares, one a store name points at, and all of
// them while a sandbox of the template lives.
func TestDeleteTemplateReleasesBuilds(t *testing.T) {
	dir := t.TempDir()
	ts, err := newTemplates(dir, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := func(c byte) string { return strings.Repeat(string(c), 64) }
	for _, c := range []byte{'a', 'b', 'c', 'd'} {
		d := filepath.Join(dir, "builds", id(c))
		if err := os.MkdirAll(filepath.Join(d, "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "build.json"), []byte(`{"id":"`+id(c)+`"}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "names", "operator-env"), []byte(id('c')+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mine := &template{ID: "t1", Name: "mine", Builds: []*tplBuild{{EnvID: id('a')}, {EnvID: id('b')}, {EnvID: id('c')}}}
	other := &template{ID: "t2", Name: "theirs", Builds: []*tplBuild{{EnvID: id('b')}}}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.teams["other"] = []*template{other}
	if err := ts.save("other"); err != nil {
		t.Fatal(err)
	}
	delete(ts.teams, "other") // held on disk only, as after a restart

	removed, kept := ts.releaseBuilds("me", mine, true)
	if len(removed) != 0 || len(kept) != 3 {
		t.Errorf("with a live sandbox: removed %v, kept %v", removed, kept)
	}
	removed, kept = ts.releaseBuilds("me", mine, false)
	if strings.Join(removed, ",") != id('a')[:12] {
		t.Errorf("removed %v, want only the unshared build", removed)
	}
	if len(kept) != 2 || !strings.Contains(kept[0]+kept[1], "another template") || !strings.Contains(kept[0]+kept[1], "operator-env") {
		t.Errorf("kept %v", kept)
	}
	for c, want := range map[byte]bool{'a': false, 'b': true, 'c': true, 'd': true} {
		if _, err := os.Stat(filepath.Join(dir, "builds", id(c))); (err == nil) != want {
			t.Errorf("build %c present: %v, want %v", c, err == nil, want)
		}
	}
}

// TestTemplateQueueOneAtATime: builds queued together run one after the
// other, never two at once (a build takes the machine's cores).
func TestTemplateQueueOneAtATime(t *testing.T) {
	ts, err := newTemplates(t.TempDir(), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{templates: ts, log: slog.New(slog.DiscardHandler)}
	ts.started = true
	go s.buildWorker()
	defer func() { _ = s.closeBuilds(time.Minute) }()
	var mu sync.Mutex
	running, most := 0, 0
	done := make(chan struct{}, 4)
	for i := 0; i < 4; i++ {
		ts.queue <- queuedBuild{run: func(context.Context) {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			runtime.Gosched()
			time.Sleep(time.Millisecond) // give an overlapping job its chance
			mu.Lock()
			running--
			mu.Unlock()
			done <- struct{}{}
		}}
	}
	for i := 0; i < 4; i++ {
		<-done
	}
	if most != 1 {
		t.Errorf("%d builds ran at once", most)
	}
}
