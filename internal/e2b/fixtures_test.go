package e2b_test

// Fixture tests: an httptest server answers with the bytes E2B's cloud sends
// (shared/reference/e2b-protocol.md §1.2, §1.5-1.7, §3.5-3.7, §4.2, §6.1), and
// the variant must parse them and map the errors.

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	e2bvariant "github.com/code-sandboxes/code-sandboxes/e2b"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// E2B's Sandbox (create and connect answer), §1.5.
const fixtureSandbox = `{"templateID":"rki5dems9wqfm4r03t7g","sandboxID":"i1a2b3c4d5e6f7g8h9j0k","clientID":"6532622b","envdVersion":"0.6.13","envdAccessToken":"tok-abc","trafficAccessToken":null,"domain":null,"alias":"code-interpreter-v1"}`

// E2B's SandboxDetail, §1.6.
const fixtureDetail = `{"templateID":"rki5dems9wqfm4r03t7g","alias":"code-interpreter-v1","sandboxID":"i1a2b3c4d5e6f7g8h9j0k","clientID":"6532622b","startedAt":"2026-08-21T10:00:00Z","endAt":"2026-08-21T11:00:00Z","envdVersion":"0.6.13","envdAccessToken":"tok-abc","allowInternetAccess":false,"domain":null,"cpuCount":2,"memoryMB":512,"diskSizeMB":10240,"metadata":{"created-by":"code-sandboxes","name":"fixture","team":"ai"},"state":"running","volumeMounts":[],"lifecycle":{"autoResume":false,"onTimeout":"kill"}}`

// Two pages of ListedSandbox, §1.6-1.7.
const fixtureListPage1 = `[{"templateID":"rki5dems9wqfm4r03t7g","alias":"code-interpreter-v1","sandboxID":"iaaaaaaaaaaaaaaaaaaaa","clientID":"6532622b","startedAt":"2026-08-21T10:00:00Z","endAt":"2026-08-21T11:00:00Z","cpuCount":2,"memoryMB":512,"diskSizeMB":10240,"metadata":{"created-by":"code-sandboxes","name":"one"},"state":"running","envdVersion":"0.6.13","volumeMounts":[]}]`
const fixtureListPage2 = `[{"templateID":"rki5dems9wqfm4r03t7g","alias":"code-interpreter-v1","sandboxID":"ibbbbbbbbbbbbbbbbbbbb","clientID":"6532622b","startedAt":"2026-08-21T09:00:00Z","endAt":"2026-08-21T12:00:00Z","cpuCount":2,"memoryMB":512,"diskSizeMB":10240,"metadata":{"created-by":"code-sandboxes","name":"two","team":"ai"},"state":"paused","envdVersion":"0.6.13","volumeMounts":[]}]`

// The code interpreter's /execute stream, §4.2: Python json.dumps spelling,
// a display_data result with an unknown MIME type in extra, the main
// result, an error whose traceback is one string with ANSI codes.
const fixtureExecute = `{"type": "number_of_executions", "execution_count": 3}
{"type": "stdout", "text": "hello\n", "timestamp": "2026-08-21T10:00:00.123456Z"}
{"type": "stderr", "text": "warn\n", "timestamp": "2026-08-21T10:00:00.223456Z"}
{"type": "result", "text": "<Figure size 640x480 with 1 Axes>", "png": "iVBORw0KGgo=", "is_main_result": false, "extra": {"application/vnd.custom+json": {"k": 1}}}
{"type": "result", "text": "2", "html": "<b>2</b>", "is_main_result": true, "extra": {}}
{"type": "keepalive"}
{"type": "error", "name": "ZeroDivisionError", "value": "division by zero", "traceback": "\u001b[0;31m---------------------------------------------------------------------------\u001b[0m\n\u001b[0;31mZeroDivisionError\u001b[0m: division by zero"}
{"type": "end_of_execution"}
`

// The edge proxy's body for a sandbox that is gone, §6.1.
const fixture502 = `{"sandboxId":"i1a2b3c4d5e6f7g8h9j0k","message":"The sandbox was not found","code":502}`

// fake is E2B's cloud in a box: the API and the data plane on one origin
// (as with E2B_SANDBOX_URL), scripted per test.
type fake struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	requests []*http.Request
	bodies   []string
	// override answers a request before the defaults when it returns true.
	override func(w http.ResponseWriter, r *http.Request, body string) bool
	// created is the network and allow_internet_access of the last
	// create, which the sandbox's detail answers as E2B's API does.
	created map[string]json.RawMessage
}

func newFake(t *testing.T) *fake {
	f := &fake{t: t}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	// The variant must not pick up the machine's E2B settings.
	for _, k := range []string{"E2B_API_KEY", "E2B_DOMAIN", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DEBUG", "E2B_VALIDATE_API_KEY"} {
		t.Setenv(k, "")
	}
	return f
}

func (f *fake) config() sandboxes.Config {
	return sandboxes.Config{Variant: "e2b", Options: e2bvariant.Options{APIKey: testKey, APIURL: f.srv.URL, SandboxURL: f.srv.URL}}
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, r)
	f.bodies = append(f.bodies, string(b))
	ov := f.override
	f.mu.Unlock()
	if ov != nil && ov(w, r, string(b)) {
		return
	}
	js := func(status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		switch {
		case r.URL.Path == "/execute":
			_, _ = io.WriteString(w, fixtureExecute)
		case strings.HasPrefix(r.URL.Path, "/x/"):
			// E2B's envd (chi) and interpreter (FastAPI) have no /x/.
			http.NotFound(w, r)
		default:
			js(http.StatusNotFound, `{"detail":"Not Found"}`)
		}
		return
	}
	if r.Header.Get("X-API-Key") != testKey {
		js(http.StatusUnauthorized, `{"code":401,"message":"Invalid API key, please visit https://e2b.dev/docs/api-key for more information."}`)
		return
	}
	switch {
	case r.Method == "POST" && r.URL.Path == "/sandboxes":
		var req map[string]json.RawMessage
		_ = json.Unmarshal(b, &req)
		f.mu.Lock()
		f.created = req
		f.mu.Unlock()
		js(http.StatusCreated, fixtureSandbox)
	case r.Method == "GET" && r.URL.Path == "/sandboxes/i1a2b3c4d5e6f7g8h9j0k":
		js(http.StatusOK, f.detail())
	case r.Method == "POST" && r.URL.Path == "/sandboxes/i1a2b3c4d5e6f7g8h9j0k/connect":
		js(http.StatusOK, fixtureSandbox)
	case r.Method == "POST" && r.URL.Path == "/sandboxes/i1a2b3c4d5e6f7g8h9j0k/timeout":
		w.WriteHeader(http.StatusNoContent)
	case r.Method == "DELETE" && r.URL.Path == "/sandboxes/i1a2b3c4d5e6f7g8h9j0k":
		w.WriteHeader(http.StatusNoContent)
	case r.Method == "PUT" && r.URL.Path == "/sandboxes/i1a2b3c4d5e6f7g8h9j0k/network":
		w.WriteHeader(http.StatusNoContent)
	case r.Method == "GET" && r.URL.Path == "/v2/sandboxes":
		if r.URL.Query().Get("nextToken") == "" {
			w.Header().Set("X-Next-Token", "MjAyNi0wOC0yMVQxMDowMDowMFpfX2lhYWFh")
			js(http.StatusOK, fixtureListPage1)
		} else {
			js(http.StatusOK, fixtureListPage2)
		}
	case strings.HasPrefix(r.URL.Path, "/sandboxes/"):
		js(http.StatusNotFound, `{"code":404,"message":"sandbox \"`+strings.Split(r.URL.Path, "/")[2]+`\" doesn't exist or you don't have access to it"}`)
	default:
		js(http.StatusNotFound, `{"code":404,"message":"not found"}`)
	}
}

// detail is fixtureDetail with the network the sandbox was created with:
// E2B's SandboxDetail carries allowInternetAccess and the network config
// (allowOut, denyOut) as given at create.
func (f *fake) detail() string {
	f.mu.Lock()
	created := f.created
	f.mu.Unlock()
	if created["network"] == nil {
		return fixtureDetail
	}
	var d map[string]json.RawMessage
	_ = json.Unmarshal([]byte(fixtureDetail), &d)
	d["network"] = created["network"]
	d["allowInternetAccess"] = created["allow_internet_access"]
	b, _ := json.Marshal(d)
	return string(b)
}

func (f *fake) find(method, path string) (*http.Request, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.requests {
		if r.Method == method && r.URL.Path == path {
			return r, f.bodies[i]
		}
	}
	return nil, ""
}

func (f *fake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func TestFixtureCreateRunInfoClose(t *testing.T) {
	f := newFake(t)
	ctx := ctxT(t, time.Minute)
	cfg := f.config()
	cfg.Name = "fixture"
	cfg.Tags = map[string]string{"team": "ai"}
	cfg.Env = map[string]string{"A": "1"}
	cfg.MaxLifetime = 90*time.Minute + 300*time.Millisecond
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID() != "i1a2b3c4d5e6f7g8h9j0k" || sb.Variant() != "e2b" {
		t.Errorf("id %q variant %q", sb.ID(), sb.Variant())
	}
	req, body := f.find("POST", "/sandboxes")
	if req == nil {
		t.Fatal("no create request")
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	// NetworkPolicy "" is none on every variant: no internet unless asked.
	want := map[string]any{"templateID": "code-interpreter-v1", "timeout": float64(5401), "secure": true, "allow_internet_access": false,
		"metadata": map[string]any{"created-by": "code-sandboxes", "name": "fixture", "team": "ai"}, "envVars": map[string]any{"A": "1"}}
	if g, w := mustJSON(got), mustJSON(want); g != w {
		t.Errorf("create body\n got %s\nwant %s", g, w)
	}

	var live []string
	ex, err := sb.RunCode(ctx, "1/0", sandboxes.OnStdout(func(m sandboxes.OutputMessage) { live = append(live, m.Line) }))
	if err != nil {
		t.Fatal(err)
	}
	req, body = f.find("POST", "/execute")
	if req.Header.Get("E2b-Sandbox-Id") != sb.ID() || req.Header.Get("E2b-Sandbox-Port") != "49999" || req.Header.Get("X-Access-Token") != "tok-abc" {
		t.Errorf("execute headers %v", req.Header)
	}
	if !strings.Contains(body, `"code":"1/0"`) {
		t.Errorf("execute body %s", body)
	}
	if ex.ExecutionCount != 3 || ex.Stdout() != "hello\n" || ex.Stderr() != "warn\n" || len(live) != 1 {
		t.Errorf("count %d stdout %q stderr %q live %q", ex.ExecutionCount, ex.Stdout(), ex.Stderr(), live)
	}
	if ts := ex.Logs.Stdout[0].Timestamp; !ts.Equal(time.Date(2026, 8, 21, 10, 0, 0, 123456000, time.UTC)) {
		t.Errorf("stdout timestamp %v", ts)
	}
	if len(ex.Results) != 2 || ex.Results[0].IsMainResult || !ex.Results[1].IsMainResult {
		t.Fatalf("results %+v", ex.Results)
	}
	if png := ex.Results[0].PNG(); string(png) != "\x89PNG\r\n\x1a\n" {
		t.Errorf("png %q", png)
	}
	// An unknown MIME type travels in extra; the public package makes it data.
	if mustJSON(ex.Results[0].Data["application/vnd.custom+json"]) != `{"k":1}` {
		t.Errorf("extra MIME type: %+v", ex.Results[0])
	}
	if ex.Text() != "2" || ex.Results[1].HTML() != "<b>2</b>" {
		t.Errorf("main result %q %q", ex.Text(), ex.Results[1].HTML())
	}
	if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || ex.Error.Value != "division by zero" || !strings.Contains(ex.Error.Traceback, "\x1b[0;31mZeroDivisionError") || ex.Success() {
		t.Errorf("error %+v", ex.Error)
	}

	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantInfo := sandboxes.Info{ID: "i1a2b3c4d5e6f7g8h9j0k", Variant: "e2b", Name: "fixture", Tags: map[string]string{"team": "ai"}, Status: "running",
		CreatedAt: time.Date(2026, 8, 21, 10, 0, 0, 0, time.UTC), EndAt: time.Date(2026, 8, 21, 11, 0, 0, 0, time.UTC), Memory: 512 << 20, CPUs: 2, Network: "none"}
	if mustJSON(info) != mustJSON(wantInfo) {
		t.Errorf("info\n got %s\nwant %s", mustJSON(info), mustJSON(wantInfo))
	}

	if err := sb.SetTimeout(ctx, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, body := f.find("POST", "/sandboxes/i1a2b3c4d5e6f7g8h9j0k/timeout"); body != `{"timeout":2}` {
		t.Errorf("timeout body %s", body)
	}
	if h, err := sb.Host(ctx, 8080); err != nil || !strings.HasPrefix(h, "127.0.0.1:") {
		t.Errorf("host with a sandbox URL = %q, %v", h, err)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if r, _ := f.find("DELETE", "/sandboxes/i1a2b3c4d5e6f7g8h9j0k"); r == nil || r.Header.Get("X-API-Key") != testKey {
		t.Error("Close did not DELETE the sandbox with the key")
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Variables and Interrupt on a host without our /x/ extension (E2B's cloud).
func TestFixtureNoExtension(t *testing.T) {
	f := newFake(t)
	ctx := ctxT(t, time.Minute)
	sb, err := sandboxes.Create(ctx, f.config())
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	var v any
	err = sb.GetVariable(ctx, "x", &v)
	if !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "extension") {
		t.Errorf("GetVariable = %v, want ErrNotSupported with the reason", err)
	}
	if err := sb.SetVariable(ctx, "x", 1); !errors.Is(err, sandboxes.ErrNotSupported) {
		t.Errorf("SetVariable = %v, want ErrNotSupported", err)
	}
	if ok, err := sb.Interrupt(ctx); ok || err != nil {
		t.Errorf("Interrupt = %v, %v; want false, nil", ok, err)
	}
	// One probe (envd, with the token), and no /x/ call beyond it.
	var probes, others int
	f.mu.Lock()
	for _, r := range f.requests {
		switch {
		case r.URL.Path == "/x/info":
			probes++
			if r.Header.Get("X-Access-Token") != "tok-abc" || r.Header.Get("E2b-Sandbox-Port") != "49983" {
				t.Errorf("probe headers %v", r.Header)
			}
		case strings.HasPrefix(r.URL.Path, "/x/"):
			others++
		}
	}
	f.mu.Unlock()
	if probes != 1 || others != 0 {
		t.Errorf("%d probes, %d other /x/ requests; want 1 and 0", probes, others)
	}
}

func TestFixtureListPagesAndFilters(t *testing.T) {
	f := newFake(t)
	ctx := ctxT(t, time.Minute)
	list, err := sandboxes.List(ctx, f.config(), sandboxes.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "iaaaaaaaaaaaaaaaaaaaa" || list[1].Name != "two" || list[1].Status != "paused" || list[1].Tags["team"] != "ai" {
		t.Fatalf("list = %+v", list)
	}
	var queries []url.Values
	f.mu.Lock()
	for _, r := range f.requests {
		if r.URL.Path == "/v2/sandboxes" {
			queries = append(queries, r.URL.Query())
		}
	}
	f.mu.Unlock()
	if len(queries) != 2 || queries[1].Get("nextToken") != "MjAyNi0wOC0yMVQxMDowMDowMFpfX2lhYWFh" {
		t.Fatalf("queries %v", queries)
	}
	// Decoded as E2B's API does: unescape the parameter, split on & and =,
	// unescape key and value.
	meta := decodeMetadata(t, queries[0].Get("metadata"))
	if mustJSON(meta) != `{"created-by":"code-sandboxes"}` {
		t.Errorf("metadata filter %v", meta)
	}

	list, err = sandboxes.List(ctx, f.config(), sandboxes.ListOptions{Tags: map[string]string{"team": "a&b=c d"}, Name: "two"})
	if err != nil || len(list) != 0 {
		t.Errorf("filtered list = %+v, %v (the fixture's sandboxes do not match)", list, err)
	}
	f.mu.Lock()
	last := f.requests[len(f.requests)-2].URL.Query().Get("metadata")
	f.mu.Unlock()
	if meta := decodeMetadata(t, last); mustJSON(meta) != `{"created-by":"code-sandboxes","name":"two","team":"a\u0026b=c d"}` {
		t.Errorf("metadata filter %v", meta)
	}

	cfg := f.config()
	e2bOptions(&cfg).ListAll = true
	if _, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	last = f.requests[len(f.requests)-1].URL.Query().Get("metadata")
	f.mu.Unlock()
	if last != "" {
		t.Errorf("ListAll still filters: %q", last)
	}
}

func decodeMetadata(t *testing.T, raw string) map[string]string {
	t.Helper()
	s, err := url.QueryUnescape(raw)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, pair := range strings.Split(s, "&") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 {
			t.Fatalf("pair %q of %q", pair, s)
		}
		k, _ := url.QueryUnescape(kv[0])
		v, _ := url.QueryUnescape(kv[1])
		out[k] = v
	}
	return out
}

func TestFixtureGetConnects(t *testing.T) {
	f := newFake(t)
	ctx := ctxT(t, time.Minute)
	f.override = func(w http.ResponseWriter, r *http.Request, body string) bool {
		if r.URL.Path == "/v2/sandboxes" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, "["+fixtureDetail+"]")
			return true
		}
		return false
	}
	sb, err := sandboxes.Get(ctx, f.config(), "fixture")
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Detach()
	if sb.ID() != "i1a2b3c4d5e6f7g8h9j0k" {
		t.Errorf("id %q", sb.ID())
	}
	if r, body := f.find("POST", "/sandboxes/i1a2b3c4d5e6f7g8h9j0k/connect"); r == nil || !strings.HasPrefix(body, `{"timeout":`) {
		t.Errorf("connect request %v %q", r, body)
	}
}

func TestFixtureErrors(t *testing.T) {
	f := newFake(t)
	ctx := ctxT(t, time.Minute)

	// 401: ErrUnauthorized, saying where the key came from.
	cfg := f.config()
	e2bOptions(&cfg).APIKey = "e2b_" + strings.Repeat("0", 40)
	_, err := sandboxes.Create(ctx, cfg)
	if !errors.Is(err, sandboxes.ErrUnauthorized) || !strings.Contains(err.Error(), "e2b.Options.APIKey") || !strings.Contains(err.Error(), "Invalid API key") {
		t.Errorf("401 = %v", err)
	}
	e2bOptions(&cfg).APIKey = ""
	t.Setenv("E2B_API_KEY", "e2b_"+strings.Repeat("1", 40))
	if _, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{}); !errors.Is(err, sandboxes.ErrUnauthorized) || !strings.Contains(err.Error(), "$E2B_API_KEY") {
		t.Errorf("401 with the env key = %v", err)
	}

	// No key, or a malformed one: refused before any request.
	t.Setenv("E2B_API_KEY", "")
	n := f.count()
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) || !errors.Is(err, sandboxes.ErrUnauthorized) || !strings.Contains(err.Error(), "E2B_API_KEY") {
		t.Errorf("no key = %v", err)
	}
	e2bOptions(&cfg).APIKey = "sk-not-e2b"
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "e2b_<hex>") {
		t.Errorf("malformed key = %v", err)
	}
	if f.count() != n {
		t.Errorf("a request was sent without a valid key")
	}

	// 404 on the API: ErrNotFound, the sandbox expired or was killed.
	cfg = f.config()
	_, err = sandboxes.Kill(ctx, cfg, "", sandboxes.ListOptions{Tags: map[string]string{"x": "y"}}) // lists, kills nothing
	if err != nil {
		t.Errorf("kill by tags with no match: %v", err)
	}
	f.override = func(w http.ResponseWriter, r *http.Request, body string) bool {
		switch {
		case r.URL.Path == "/v2/sandboxes":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"code":429,"message":"Rate limit exceeded, please try again later."}`)
			return true
		case r.Header.Get("E2b-Sandbox-Id") != "":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, fixture502)
			return true
		}
		return false
	}
	// 429: ErrRateLimited.
	if _, err := sandboxes.List(ctx, cfg, sandboxes.ListOptions{}); !errors.Is(err, sberr.ErrRateLimited) || !strings.Contains(err.Error(), "Rate limit exceeded") {
		t.Errorf("429 = %v", err)
	}
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	// 502 from the edge proxy: ErrNotFound, the sandbox expired or was killed.
	_, err = sb.RunCode(ctx, "1")
	if !errors.Is(err, sandboxes.ErrNotFound) || !strings.Contains(err.Error(), "expired or was killed") || !strings.Contains(err.Error(), "The sandbox was not found") {
		t.Errorf("502 on execute = %v", err)
	}
	if _, err := sb.Files().ReadBytes(ctx, "/a"); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("502 on /files = %v", err)
	}
	if _, err := sb.Commands().Run(ctx, "true"); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("502 on process Start = %v", err)
	}
	if ok, err := sb.Files().Exists(ctx, "/a"); ok || !errors.Is(err, sandboxes.ErrUnavailable) {
		t.Errorf("502 on Stat = %v, %v; want ErrUnavailable, not 'does not exist'", ok, err)
	}
	f.override = nil
	if _, err := sandboxes.Kill(ctx, cfg, "inope", sandboxes.ListOptions{}); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("kill unknown = %v", err)
	}
	err = (func() error { _, err := sandboxes.Get(ctx, cfg, "inope"); return err })()
	if !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("get unknown = %v", err)
	}
}

func TestFixtureAPIv404OnSandbox(t *testing.T) {
	f := newFake(t)
	ctx := ctxT(t, time.Minute)
	sb, err := sandboxes.Create(ctx, f.config())
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Detach()
	f.override = func(w http.ResponseWriter, r *http.Request, body string) bool {
		if strings.HasPrefix(r.URL.Path, "/sandboxes/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"code":404,"message":"sandbox \"i1a2b3c4d5e6f7g8h9j0k\" doesn't exist or you don't have access to it"}`)
			return true
		}
		return false
	}
	if err := sb.SetTimeout(ctx, time.Minute); !errors.Is(err, sandboxes.ErrNotFound) || !strings.Contains(err.Error(), "expired or was killed") {
		t.Errorf("set timeout = %v", err)
	}
	if _, err := sb.Info(ctx); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("info = %v", err)
	}
	if err := sb.Close(); err != nil {
		t.Errorf("close of a gone sandbox = %v", err)
	}
}

func TestFixtureRefusals(t *testing.T) {
	f := newFake(t)
	ctx := ctxT(t, time.Minute)
	n := f.count()
	for name, mod := range map[string]func(*sandboxes.Config){
		"memory":   func(c *sandboxes.Config) { c.Memory = 1 << 30 },
		"cpu":      func(c *sandboxes.Config) { c.CPU = 2 },
		"reserved": func(c *sandboxes.Config) { c.Tags = map[string]string{"created-by": "me"} },
		"conflict": func(c *sandboxes.Config) {
			no := false
			c.NetworkPolicy = "all"
			e2bOptions(c).AllowInternetAccess = &no
		},
		"template":  func(c *sandboxes.Config) { c.Environment = "base"; e2bOptions(c).Template = "other" },
		"pkgs-none": func(c *sandboxes.Config) { c.NetworkPolicy = "none"; c.Packages = []string{"requests"} },
	} {
		c := f.config()
		mod(&c)
		_, err := sandboxes.Create(ctx, c)
		if !errors.Is(err, sandboxes.ErrNotSupported) && !errors.Is(err, sandboxes.ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if f.count() != n {
		t.Error("a refused Config still sent a request")
	}
	// Allowlist: allowOut the hosts, deny the rest.
	c := f.config()
	c.NetworkPolicy, c.AllowedHosts = "allowlist", []string{"pypi.org", "10.0.0.0/8"}
	c.Environment = "e2b-code-interpreter"
	sb, err := sandboxes.Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	_, body := f.find("POST", "/sandboxes")
	if !strings.Contains(body, `"network":{"allowOut":["pypi.org","10.0.0.0/8"],"denyOut":["0.0.0.0/0"]}`) || !strings.Contains(body, `"templateID":"code-interpreter-v1"`) {
		t.Errorf("allowlist body %s", body)
	}
}

// e2bOptions makes c.Options a fresh *e2b.Options (the variant takes a
// pointer as well as a value) holding what it had, and returns it for a
// test to change; copies of c made before keep theirs.
func e2bOptions(c *sandboxes.Config) *e2bvariant.Options {
	var o e2bvariant.Options
	switch v := c.Options.(type) {
	case *e2bvariant.Options:
		o = *v
	case e2bvariant.Options:
		o = v
	}
	c.Options = &o
	return &o
}

// A Config without MaxLifetime asks E2B for an hour, which every team's
// tier allows (the package's own default, a day, exceeds the hobby tier's).
func TestFixtureDefaultLifetime(t *testing.T) {
	f := newFake(t)
	ctx := ctxT(t, time.Minute)
	sb, err := sandboxes.Create(ctx, f.config())
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	_, body := f.find("POST", "/sandboxes")
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got["timeout"] != float64(3600) {
		t.Errorf("default lifetime on e2b: timeout %v, want 3600", got["timeout"])
	}
}

// Network policies go to E2B as its allow_internet_access and network
// (create) and SandboxNetworkUpdateConfig (PUT /sandboxes/{id}/network);
// what E2B can't do is refused before any request.
func TestFixtureNetworkOptions(t *testing.T) {
	f := newFake(t)
	ctx := ctxT(t, time.Minute)
	c := f.config()
	c.NetworkPolicy, c.DeniedHosts, c.AllowedHosts = "all", []string{"198.51.100.0/24"}, []string{"198.51.100.7", "api.example.com"}
	sb, err := sandboxes.Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	_, body := f.find("POST", "/sandboxes")
	if !strings.Contains(body, `"allow_internet_access":true,"network":{"allowOut":["198.51.100.7","api.example.com"],"denyOut":["198.51.100.0/24"]}`) {
		t.Errorf("create body %s", body)
	}
	for _, tc := range []struct {
		n    sandboxes.Network
		want string
	}{
		{sandboxes.Network{Policy: "allowlist", AllowedHosts: []string{"pypi.org"}}, `{"allowOut":["pypi.org"],"denyOut":["0.0.0.0/0"]}`},
		{sandboxes.Network{Policy: "all", DeniedHosts: []string{"203.0.113.5"}}, `{"denyOut":["203.0.113.5"]}`},
		{sandboxes.Network{Policy: "none"}, `{"allow_internet_access":false}`},
		{sandboxes.Network{Policy: "all"}, `{}`},
	} {
		before := f.count()
		if err := sb.UpdateNetwork(ctx, tc.n); err != nil {
			t.Fatalf("%+v: %v", tc.n, err)
		}
		f.mu.Lock()
		var got []string
		for i, r := range f.requests[before:] {
			if r.Method == "PUT" && r.URL.Path == "/sandboxes/i1a2b3c4d5e6f7g8h9j0k/network" {
				got = append(got, f.bodies[before+i])
			}
		}
		f.mu.Unlock()
		if len(got) != 1 || strings.TrimSpace(got[0]) != tc.want {
			t.Errorf("%+v: PUT bodies %q, want %s", tc.n, got, tc.want)
		}
	}
	n := f.count()
	for _, bad := range []sandboxes.Network{
		{Policy: "all", AllowPrivate: true},                     // E2B never reaches private ranges
		{Policy: "all", AllowedHosts: []string{"pypi.org"}},     // exceptions to nothing
		{Policy: "allowlist", DeniedHosts: []string{"1.2.3.4"}}, // denied only with all
		{Policy: "sometimes"},
	} {
		if err := sb.UpdateNetwork(ctx, bad); !errors.Is(err, sandboxes.ErrInvalidConfig) && !errors.Is(err, sandboxes.ErrNotSupported) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if f.count() != n {
		t.Error("a refused update still sent a request")
	}
}

// A plain Create with NetworkPolicy allowlist is sent as allowOut plus a
// deny-all, and the result says so: Info shows the rules the sandbox got
// as the API reports them. A host that doesn't keep them (no network in
// its answer, or no deny-all) would leave the sandbox more open than
// asked: Create refuses it with the reason and removes the sandbox.
func TestFixtureAllowlistResult(t *testing.T) {
	f := newFake(t)
	ctx := ctxT(t, time.Minute)
	c := f.config()
	c.NetworkPolicy, c.AllowedHosts = "allowlist", []string{"pypi.org", "203.0.113.7"}
	sb, err := sandboxes.Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Network != "allowlist" || mustJSON(info.AllowedHosts) != `["pypi.org","203.0.113.7"]` || mustJSON(info.DeniedHosts) != `["0.0.0.0/0"]` {
		t.Errorf("Info network %q allowed %q denied %q; want allowlist, the hosts, 0.0.0.0/0", info.Network, info.AllowedHosts, info.DeniedHosts)
	}
	b, _ := json.Marshal(info)
	if !strings.Contains(string(b), `"allowed_hosts":["pypi.org","203.0.113.7"],"denied_hosts":["0.0.0.0/0"]`) {
		t.Errorf("Info JSON %s", b)
	}

	for name, answer := range map[string]string{
		"no network":   `{}`,
		"no deny-all":  `{"network":{"allowOut":["pypi.org","203.0.113.7"]}}`,
		"more allowed": `{"network":{"allowOut":["pypi.org","203.0.113.7","0.0.0.0/0"],"denyOut":["0.0.0.0/0"]}}`,
	} {
		f := newFake(t)
		f.override = func(w http.ResponseWriter, r *http.Request, body string) bool {
			if r.Method != "GET" || r.URL.Path != "/sandboxes/i1a2b3c4d5e6f7g8h9j0k" {
				return false
			}
			var d map[string]any
			_ = json.Unmarshal([]byte(fixtureDetail), &d)
			d["allowInternetAccess"] = true
			var a map[string]any
			_ = json.Unmarshal([]byte(answer), &a)
			if a["network"] != nil {
				d["network"] = a["network"]
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(d)
			return true
		}
		c := f.config()
		c.NetworkPolicy, c.AllowedHosts = "allowlist", []string{"pypi.org", "203.0.113.7"}
		_, err := sandboxes.Create(ctx, c)
		if !errors.Is(err, sandboxes.ErrNotSupported) || !strings.Contains(err.Error(), "was removed") {
			t.Errorf("%s: Create = %v, want a refusal", name, err)
		}
		if r, _ := f.find("DELETE", "/sandboxes/i1a2b3c4d5e6f7g8h9j0k"); r == nil {
			t.Errorf("%s: the refused sandbox was not killed", name)
		}
	}
}
