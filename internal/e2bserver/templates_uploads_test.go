package e2bserver

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// uploadLink asks for the upload URL of hash ("" when present).
func uploadLink(t *testing.T, base, tpl, hash string) string {
	t.Helper()
	var link struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	if resp := call(t, "GET", base+"/templates/"+tpl+"/files/"+hash, testKey, "", nil, &link); resp.StatusCode != 201 {
		t.Fatalf("file link: %d", resp.StatusCode)
	}
	if link.Present {
		return ""
	}
	return link.URL
}

// put uploads body to u (chunked: no Content-Length) and returns the
// status and the answer.
func put(t *testing.T, u string, body []byte, chunked bool) (int, string) {
	t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // not a type net/http knows the length of
	}
	req, _ := http.NewRequest("PUT", u, rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func newTemplateID(t *testing.T, base, name string) string {
	t.Helper()
	var req struct {
		TemplateID string `json:"templateID"`
	}
	if resp := call(t, "POST", base+"/v3/templates", testKey, `{"name":"`+name+`"}`, nil, &req); resp.StatusCode != 202 {
		t.Fatalf("POST /v3/templates: %d", resp.StatusCode)
	}
	return req.TemplateID
}

// TestTemplateUploadQuota: a team's stored upload bytes are bounded; an
// upload over the bound is refused with a 413 that names the limit and
// what to do, and leaves no file behind, whether it announced its size
// or not.
func TestTemplateUploadQuota(t *testing.T) {
	const quota = 1 << 20
	o := Options{TemplateBuilds: true, TemplateUploadQuota: quota}
	o.Config.EnvironmentDir = t.TempDir()
	s, base := testServer(t, o)
	tpl := newTemplateID(t, base, "quota")
	a, b, c := strings.Repeat("a1", 32), strings.Repeat("b2", 32), strings.Repeat("c3", 32)
	if st, msg := put(t, uploadLink(t, base, tpl, a), randomBytes(700<<10), false); st != 200 {
		t.Fatalf("first upload: %d %s", st, msg)
	}
	for _, tc := range []struct {
		hash    string
		chunked bool
	}{{b, false}, {c, true}} {
		st, msg := put(t, uploadLink(t, base, tpl, tc.hash), randomBytes(700<<10), tc.chunked)
		if st != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "limit of "+strconv.Itoa(quota)+" bytes") ||
			!strings.Contains(msg, "--template-upload-quota") || !strings.Contains(msg, "delete templates") {
			t.Errorf("upload over the quota (chunked %v): %d %s", tc.chunked, st, msg)
		}
	}
	dir := filepath.Dir(s.templates.uploadPath("default", a))
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != a+".tar" {
		t.Errorf("the team's files after refused uploads: %v, want only the first", names)
	}
	// A small one still fits.
	if st, msg := put(t, uploadLink(t, base, tpl, b), randomBytes(100<<10), true); st != 200 {
		t.Errorf("an upload within the quota: %d %s", st, msg)
	}
}

// TestTemplateUploadsRemoved: a template's archives go with it (unless
// another template of the team uses them), and archives unused for a day
// go on their own.
func TestTemplateUploadsRemoved(t *testing.T) {
	s, base := readyTemplateServer(t, "keeper")
	own, shared, idle := strings.Repeat("d4", 32), strings.Repeat("e5", 32), strings.Repeat("f6", 32)
	var req struct {
		TemplateID string `json:"templateID"`
		BuildID    string `json:"buildID"`
	}
	if resp := call(t, "POST", base+"/v3/templates", testKey, `{"name":"gone"}`, nil, &req); resp.StatusCode != 202 {
		t.Fatalf("POST /v3/templates: %d", resp.StatusCode)
	}
	gone := req.TemplateID
	for _, h := range []string{own, shared, idle} {
		if st, msg := put(t, uploadLink(t, base, gone, h), tarGzOf(t, map[string]string{"app/x": h}), false); st != 200 {
			t.Fatalf("upload: %d %s", st, msg)
		}
	}
	copyBody := func(hashes ...string) string {
		var steps []string
		for _, h := range hashes {
			steps = append(steps, `{"type":"COPY","args":["app","/app-`+h[:4]+`","",""],"filesHash":"`+h+`"}`)
		}
		return `{"fromTemplate":"keeper","steps":[` + strings.Join(steps, ",") + `]}`
	}
	if resp := call(t, "POST", base+"/v2/templates/"+gone+"/builds/"+req.BuildID, testKey, copyBody(own, shared), nil, nil); resp.StatusCode != 202 {
		t.Fatalf("trigger: %d", resp.StatusCode)
	}
	waitBuild(t, base, testKey, gone, req.BuildID) // ready or not: its files are named
	tpl, build := requestAndTrigger(t, base, testKey, "keeper", copyBody(shared))
	waitBuild(t, base, testKey, tpl, build)
	if resp := call(t, "DELETE", base+"/templates/gone", testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	if fileExists(s.templates.uploadPath("default", own)) {
		t.Error("the deleted template's own archive is still stored")
	}
	if !fileExists(s.templates.uploadPath("default", shared)) {
		t.Error("an archive another template uses was removed with the deleted one")
	}
	// Unused past the TTL: removed at the next sweep (an upload link asks
	// for one when none ran for a while); one used a moment ago stays.
	old := time.Now().Add(-uploadTTL - time.Hour)
	if err := os.Chtimes(s.templates.uploadPath("default", idle), old, old); err != nil {
		t.Fatal(err)
	}
	s.templates.mu.Lock()
	s.templates.sweptAt = time.Time{}
	s.templates.mu.Unlock()
	keeper := newTemplateID(t, base, "keeper")
	if uploadLink(t, base, keeper, idle) == "" {
		t.Error("an archive unused for more than a day is still present")
	}
	if uploadLink(t, base, keeper, shared) != "" {
		t.Error("an archive used a moment ago was swept")
	}
}
