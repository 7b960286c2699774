package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/local"
)

const (
	keyA = "e2b_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1"
	keyB = "e2b_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2"
)

// startServe runs a real serve (console on) with two teams over a fresh
// runtime directory; its sandboxes are killed at the end. The test binary
// is each sandbox's agent (importing the sandboxes package does that).
func startServe(t *testing.T) string {
	t.Helper()
	rt, err := os.MkdirTemp("", "cs-console-")
	if err != nil {
		t.Fatal(err)
	}
	s, err := e2bserver.New(e2bserver.Options{
		Keys:    []e2bserver.Key{{Key: keyA, Team: "team-a"}, {Key: keyB, Team: "team-b"}},
		Config:  sandboxes.Config{Options: local.Options{RuntimeDir: rt}, IdleTimeout: sandboxes.NoIdleTimeout},
		Console: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	base, stop, err := s.StartLoopback(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("serve shutdown: %v", err)
		}
		os.RemoveAll(rt)
	})
	return base
}

func needSandboxes(t *testing.T) {
	t.Helper()
	err := isolate.CheckSupport()
	testdep.Require(t, err == nil, "local sandboxes (user namespaces, cgroups v2): "+errString(err))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// apiCall is an SDK's call to serve's API.
func apiCall(t *testing.T, base, key, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

func createSandbox(t *testing.T, base, key string) string {
	t.Helper()
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	if st := apiCall(t, base, key, "POST", "/sandboxes", `{"templateID":"base","timeout":600,"metadata":{"purpose":"<img src=x onerror=alert(1)>"}}`, &sb); st != http.StatusCreated {
		t.Fatalf("create: %d", st)
	}
	return sb.SandboxID
}

// browser is a plain http client with a cookie jar that never follows
// redirects (the tests look at them).
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, Timeout: 90 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path string, form url.Values, hdr map[string]string) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

// signIn signs b in with key, as the sign-in form does.
func (b *browser) signIn(key string) {
	b.t.Helper()
	resp, body := b.do("POST", "/console/login", url.Values{"key": {key}}, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": b.base})
	if resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("sign-in: %d %s", resp.StatusCode, body)
	}
}

var csrfPattern = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// csrf is the session's token, read from a page as a script of the page
// could.
func (b *browser) csrf() string {
	b.t.Helper()
	_, body := b.do("GET", "/console/", nil, nil)
	m := csrfPattern.FindStringSubmatch(body)
	if m == nil {
		b.t.Fatalf("no CSRF token in the sandboxes page: %.300s", body)
	}
	return m[1]
}

func (b *browser) cookie() string {
	u, _ := url.Parse(b.base + "/console/")
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == "cs_console" {
			return c.Value
		}
	}
	return ""
}
