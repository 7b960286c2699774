//go:build !localonly

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// E2B's ListedSandbox (GET /v2/sandboxes), shared/reference/e2b-protocol.md
// §1.6: one sandbox code-sandboxes made, one E2B's SDK made.
const (
	listedOurs    = `{"templateID":"rki5dems9wqfm4r03t7g","alias":"code-interpreter-v1","sandboxID":"iaaaaaaaaaaaaaaaaaaaa","clientID":"6532622b","startedAt":"2026-08-21T10:00:00Z","endAt":"2099-08-21T11:00:00Z","cpuCount":2,"memoryMB":512,"diskSizeMB":10240,"metadata":{"created-by":"code-sandboxes","name":"ours"},"state":"running","envdVersion":"0.6.13","volumeMounts":[]}`
	listedForeign = `{"templateID":"rki5dems9wqfm4r03t7g","alias":"code-interpreter-v1","sandboxID":"izzzzzzzzzzzzzzzzzzzz","clientID":"6532622b","startedAt":"2026-08-21T10:00:00Z","endAt":"2099-08-21T11:00:00Z","cpuCount":2,"memoryMB":512,"diskSizeMB":10240,"metadata":{"app":"notebook"},"state":"running","envdVersion":"0.6.13","volumeMounts":[]}`
)

// fakeE2BList answers GET /v2/sandboxes as E2B's API does: the metadata
// query filters, and without one the whole team's sandboxes are listed.
func fakeE2BList(t *testing.T) (env []string, queries func() []url.Values) {
	var mu sync.Mutex
	var seen []url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-API-Key") != "e2b_0123456789abcdef" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"code":401,"message":"Invalid API key"}`)
			return
		}
		if r.Method != "GET" || r.URL.Path != "/v2/sandboxes" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"code":404,"message":"not found"}`)
			return
		}
		q := r.URL.Query()
		mu.Lock()
		seen = append(seen, q)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		meta, _ := url.QueryUnescape(q.Get("metadata"))
		switch {
		case meta == "":
			_, _ = io.WriteString(w, "["+listedOurs+","+listedForeign+"]")
		case meta == "created-by=code-sandboxes":
			_, _ = io.WriteString(w, "["+listedOurs+"]")
		default:
			_, _ = io.WriteString(w, "[]")
		}
	}))
	t.Cleanup(srv.Close)
	env = []string{"E2B_API_KEY=e2b_0123456789abcdef", "E2B_API_URL=" + srv.URL, "E2B_SANDBOX_URL=" + srv.URL, "E2B_DOMAIN=", "E2B_DEBUG="}
	return env, func() []url.Values {
		mu.Lock()
		defer mu.Unlock()
		return append([]url.Values(nil), seen...)
	}
}

// list -v e2b shows what code-sandboxes made; --all the whole team's
// sandboxes, whoever made them; --all elsewhere is refused.
func TestListAllE2B(t *testing.T) {
	env, queries := fakeE2BList(t)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // cli() passes our environment on
	}
	out, errs, code := cli(t, "", "list", "-v", "e2b")
	if code != 0 || !strings.Contains(out, "iaaaaaaaaaaaaaaaaaaaa") || strings.Contains(out, "izzzzzzzzzzzzzzzzzzzz") {
		t.Fatalf("list -v e2b: %d %q %q", code, out, errs)
	}
	if q := queries(); len(q) != 1 || q[0].Get("metadata") == "" {
		t.Errorf("list without --all does not filter on created-by: %v", q)
	}
	out, errs, code = cli(t, "", "list", "-v", "e2b", "--all")
	if code != 0 || !strings.Contains(out, "iaaaaaaaaaaaaaaaaaaaa") || !strings.Contains(out, "izzzzzzzzzzzzzzzzzzzz") || !strings.Contains(out, "app=notebook") {
		t.Fatalf("list -v e2b --all: %d %q %q", code, out, errs)
	}
	if q := queries(); len(q) != 2 || q[1].Get("metadata") != "" {
		t.Errorf("list --all still filters: %v", q)
	}
	out, _, code = cli(t, "", "list", "-v", "e2b", "--all", "--json")
	if code != 0 || !strings.Contains(out, `"id":"izzzzzzzzzzzzzzzzzzzz"`) {
		t.Errorf("list --all --json: %d %q", code, out)
	}
	if _, errs, code := cli(t, "", "list", "--all"); code != 1 || !strings.Contains(errs, "--all applies to -v e2b") {
		t.Errorf("list --all on local: %d %q", code, errs)
	}
}
