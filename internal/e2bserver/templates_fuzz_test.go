package e2bserver

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/environment"
)

// fuzzHash names an archive the fuzz server holds for team "default", so
// that COPY steps naming it get as far as the spec's own checks.
const fuzzHash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// FuzzTemplateBuildBody: POST /v2/templates/{id}/builds/{build}'s body
// (E2B's TemplateBuildStartV2: the base, the RUN/COPY/ENV/WORKDIR/USER
// steps, start and ready commands) as triggerBuild decodes it and specOf
// maps it onto an environment spec; nothing is built. Properties: a
// refused body names the step (or "base"/"finalize") the SDK points at; an
// accepted one is a spec the environment store validates, one spec step per
// body step, its COPY archives the team's own uploads only, its base
// exactly what was asked; and the spec's steps survive their JSON round
// trip (what a build record keeps).
func FuzzTemplateBuildBody(f *testing.F) {
	for _, s := range []string{
		`{"fromImage":"e2bdev/base","steps":[{"type":"RUN","args":["pip install x","root"]},{"type":"ENV","args":["A","1","B","2"]},{"type":"WORKDIR","args":["/app"]},{"type":"USER","args":["user"]}],"startCmd":"python app.py","readyCmd":"curl localhost:8000"}`,
		`{"fromTemplate":"base","steps":[{"type":"COPY","args":["src","/app/","user","0755"],"filesHash":"` + fuzzHash + `"}]}`,
		`{"fromImage":"python:3.12-slim","force":true}`, `{"fromImage":"127.0.0.1:5000/x:y"}`,
		`{"fromTemplate":"base","steps":[{"type":"COPY","args":["../../etc","/"],"filesHash":"` + fuzzHash + `"}]}`,
		`{"fromTemplate":"base","steps":[{"type":"COPY","args":["a","/b"],"filesHash":"../../x"}]}`,
		`{"fromTemplate":"base","steps":[{"type":"RUN","args":["a\u0000b"]}]}`,
		`{"fromTemplate":"base","steps":[{"type":"ENV","args":["1BAD","x"]}]}`,
		`{"fromTemplate":"base","steps":[{"type":"WORKDIR","args":["rel"]}]}`,
		`{"fromTemplate":"base","steps":[{"type":"USER","args":["Root;rm"]}]}`,
		`{"fromTemplate":"base","steps":[{"type":"ARG","args":["x"]}]}`,
		`{"fromImageRegistry":{"type":"aws"},"fromImage":"x"}`, `{"fromImage":"a","fromTemplate":"b"}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	s, _ := fuzzServer(f, nil)
	archive := s.templates.uploadPath("default", fuzzHash)
	if err := os.MkdirAll(filepath.Dir(archive), 0o700); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(archive, nil, 0o600); err != nil {
		f.Fatal(err)
	}
	filesDir := filepath.Dir(archive) + string(filepath.Separator)
	tp := &template{ID: "fuzztemplate", Name: "fuzz"}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var body startBody
		if json.Unmarshal(raw, &body) != nil {
			return // decode answers 400
		}
		spec, step, err := s.specOf("default", tp, &body)
		if err != nil {
			if step == "" || strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("refusal without its step or reason: %q %v", step, err)
			}
			return
		}
		if err := environment.Validate(spec); err != nil {
			t.Fatalf("accepted a spec the store refuses: %v", err)
		}
		if len(spec.Steps) != len(body.Steps) {
			t.Fatalf("%d body steps became %d", len(body.Steps), len(spec.Steps))
		}
		for i, st := range spec.Steps {
			if c := st.Copy; c != nil && !strings.HasPrefix(c.Archive, filesDir) {
				t.Fatalf("step %d copies from %q, outside the team's uploads %s", i, c.Archive, filesDir)
			}
		}
		// An image names itself as the base, except E2B's own base images
		// (builtinBases: "base", "e2bdev/…"), which are our environments.
		if body.FromImage != "" && !slices.Contains(builtinBases, body.FromImage) && !strings.Contains(body.FromImage, "e2bdev/") && spec.Base.Image != body.FromImage ||
			spec.Base.Image != "" && spec.Base.Environment != "" {
			t.Fatalf("base %+v for fromImage %q fromTemplate %q", spec.Base, body.FromImage, body.FromTemplate)
		}
		b, err := json.Marshal(spec.Steps)
		if err != nil {
			t.Fatal(err)
		}
		var back []environment.Step
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, spec.Steps) {
			t.Fatalf("steps %+v came back as %+v (%v)", spec.Steps, back, err)
		}
	})
}

// FuzzUploadURL: PUT /templates/{id}/files/{hash}/upload?team=&expires=&
// signature=, the presigned URL a COPY step's archive is sent to without an
// API key. The signature is the server's (fuzzed fields signed as
// fileUploadLink signs them), a forgery, or anything. Properties: only a
// URL the server signed, before it expires, stores anything; what it
// stores is the body, at the signed team's path for the signed hash, and
// nowhere else under the server's directory; everything else is refused
// with E2B's error body.
func FuzzUploadURL(f *testing.F) {
	f.Add("default", "tplid", fuzzHash, int64(0), uint8(0), "", []byte("tar"))
	f.Add("default", "tplid", fuzzHash, int64(-10), uint8(0), "", []byte("tar"))
	f.Add("other", "tplid", fuzzHash, int64(0), uint8(1), "", []byte("tar"))
	f.Add("default", "tplid", "../../../../etc/x", int64(0), uint8(0), "", []byte("x"))
	f.Add("../x", "a/../b", fuzzHash, int64(0), uint8(0), "", []byte("x"))
	f.Add("default", "tplid", fuzzHash, int64(0), uint8(2), "team=00&expires=99999999999&signature=00", []byte("x"))
	s, _ := fuzzServer(f, nil)
	root := s.templates.dir
	f.Fuzz(func(t *testing.T, team, tpl, hash string, expiresIn int64, mode uint8, raw string, body []byte) {
		defer os.RemoveAll(root)
		expiresIn %= 7200
		expires := time.Now().Unix() + expiresIn
		sig := s.templates.uploadToken(team, tpl, hash, expires)
		forged := false
		switch mode % 3 {
		case 1: // the signature of another team, template or hash
			sig = s.templates.uploadToken(team+"x", tpl, hash, expires)
			forged = true
		case 2:
			forged = true
		}
		q := url.Values{"team": {hex.EncodeToString([]byte(team))}, "expires": {strconv.FormatInt(expires, 10)}, "signature": {sig}}
		rawQuery := q.Encode()
		if mode%3 == 2 {
			rawQuery = raw
		}
		target := "/templates/" + url.PathEscape(tpl) + "/files/" + url.PathEscape(hash) + "/upload?" + rawQuery
		req, err := http.NewRequest(http.MethodPut, "http://x"+target, bytes.NewReader(body))
		if err != nil {
			return
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var stored []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				stored = append(stored, p)
			}
			return nil
		})
		if rec.Code != http.StatusOK {
			checkAPIError(t, rec)
			if len(stored) != 0 {
				t.Fatalf("refused (%d) but stored %v", rec.Code, stored)
			}
			return
		}
		genuine := !forged && expiresIn >= 0 && filesHashRE.MatchString(hash) && !strings.Contains(tpl, "/")
		if !genuine {
			t.Fatalf("upload %s accepted (mode %d, expires in %d s)", target, mode%3, expiresIn)
		}
		want := s.templates.uploadPath(team, hash)
		if len(stored) != 1 || stored[0] != want {
			t.Fatalf("stored %v, want only %s", stored, want)
		}
		if got, err := os.ReadFile(want); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("stored %d bytes, want the body's %d (%v)", len(got), len(body), err)
		}
	})
}

// FuzzTemplatesRecord: a team's templates.json as the server reads it
// back from disk (after a restart, or corrupted). Properties: any bytes
// load without a panic (an unreadable record is no templates, not a
// crash of every request of the team), builds cut short by a restart are
// marked failed, and what the server saves loads back the same.
func FuzzTemplatesRecord(f *testing.F) {
	f.Add([]byte(`[{"templateID":"t1","name":"a","builds":[{"buildID":"b1","status":"building","cpuCount":2,"memoryMB":1024}],"tags":{"default":{"buildID":"b1"}}}]`))
	f.Add([]byte(`[{"templateID":"t1","name":"a","builds":[{"buildID":"b1","status":"ready","envID":"e","startCmd":"x"}],"tags":{},"lastSpawnedAt":"2026-01-01T00:00:00Z","spawnCount":3}]`))
	f.Add([]byte(`[null]`))
	f.Add([]byte(`[{"builds":[null],"tags":{"x":null}}]`))
	f.Add([]byte(`{"not":"a list"}`))
	f.Add([]byte(``))
	s, _ := fuzzServer(f, nil)
	ts := s.templates
	f.Fuzz(func(t *testing.T, raw []byte) {
		const team = "fuzzteam"
		dir := ts.teamDir(team)
		defer os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "templates.json"), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		ts.mu.Lock()
		delete(ts.teams, team)
		l := ts.load(team)
		var names []string
		for _, tp := range l {
			if tp == nil {
				t.Fatal("a nil template loaded")
			}
			for _, b := range tp.Builds {
				if b == nil {
					t.Fatal("a nil build loaded")
				}
				if b.Status == "waiting" || b.Status == "building" {
					t.Fatalf("build %q still %s after a restart", b.ID, b.Status)
				}
			}
			_ = ts.find(team, tp.Name)
			names = append(names, tp.Name, tp.ID)
		}
		err := ts.save(team)
		first, _ := json.Marshal(l)
		delete(ts.teams, team)
		again, _ := json.Marshal(ts.load(team))
		ts.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		// Lookups over what was loaded work (they take the lock).
		for _, n := range names {
			_, _, _ = ts.resolveLaunch(team, n, false)
		}
		if !bytes.Equal(first, again) {
			t.Fatalf("saved %s, loaded back %s", first, again)
		}
	})
}
