package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestConsoleAttacks are the attacks on the console's sessions and
// routes, against a real serve: each must be refused.
func TestConsoleAttacks(t *testing.T) {
	needSandboxes(t)
	base := startServe(t)
	host := strings.TrimPrefix(base, "http://")
	sbA := createSandbox(t, base, keyA)

	anon := newBrowser(t, base)
	t.Run("no session", func(t *testing.T) {
		for _, p := range []string{"/console/", "/console/sandboxes/" + sbA, "/console/templates", "/console/snapshots", "/console/usage", "/console/sandboxes/" + sbA + "/download?path=/etc/hostname"} {
			resp, _ := anon.do("GET", p, nil, nil)
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
				t.Errorf("GET %s without a session: %d %q, want 303 to /console/login", p, resp.StatusCode, resp.Header.Get("Location"))
			}
		}
		if resp, _ := anon.do("GET", "/console/api/sandboxes", nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the sandboxes JSON without a session: %d, want 401", resp.StatusCode)
		}
		if resp, _ := anon.do("POST", "/console/sandboxes/"+sbA+"/kill", url.Values{"csrf": {strings.Repeat("0", 64)}}, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("kill without a session: %d, want 401", resp.StatusCode)
		}
	})

	t.Run("forged and fixed cookies", func(t *testing.T) {
		for _, v := range []string{strings.Repeat("a", 64), "x", keyA, strings.Repeat("0", 63) + "Z"} {
			b := newBrowser(t, base)
			u, _ := url.Parse(base + "/console/")
			b.c.Jar.SetCookies(u, []*http.Cookie{{Name: "cs_console", Value: v, Path: "/console"}})
			if resp, _ := b.do("GET", "/console/", nil, nil); resp.StatusCode != http.StatusSeeOther {
				t.Errorf("forged cookie %q: %d, want 303 to sign in", v, resp.StatusCode)
			}
		}
		// Session fixation: an id the browser had before signing in is
		// never the session's.
		b := newBrowser(t, base)
		planted := strings.Repeat("f", 64)
		u, _ := url.Parse(base + "/console/")
		b.c.Jar.SetCookies(u, []*http.Cookie{{Name: "cs_console", Value: planted, Path: "/console"}})
		b.signIn(keyA)
		if got := b.cookie(); got == planted || len(got) != 64 {
			t.Errorf("after sign-in the session id is %q: the planted one or not a fresh 64-hex id", got)
		}
		other := newBrowser(t, base)
		other.c.Jar.SetCookies(u, []*http.Cookie{{Name: "cs_console", Value: planted, Path: "/console"}})
		if resp, _ := other.do("GET", "/console/", nil, nil); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("the planted id became a session: %d", resp.StatusCode)
		}
	})

	t.Run("sign-out ends the session", func(t *testing.T) {
		b := newBrowser(t, base)
		b.signIn(keyA)
		id, tok := b.cookie(), b.csrf()
		if resp, _ := b.do("POST", "/console/logout", url.Values{"csrf": {tok}}, nil); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-out: %d", resp.StatusCode)
		}
		replay := newBrowser(t, base)
		u, _ := url.Parse(base + "/console/")
		replay.c.Jar.SetCookies(u, []*http.Cookie{{Name: "cs_console", Value: id, Path: "/console"}})
		if resp, _ := replay.do("GET", "/console/", nil, nil); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("the signed-out session id still works: %d", resp.StatusCode)
		}
	})

	a := newBrowser(t, base)
	a.signIn(keyA)
	tok := a.csrf()

	t.Run("cookie flags", func(t *testing.T) {
		b := newBrowser(t, base)
		resp, _ := b.do("POST", "/console/login", url.Values{"key": {keyA}}, map[string]string{"X-Forwarded-Proto": "https"})
		sc := resp.Header.Get("Set-Cookie")
		for _, want := range []string{"HttpOnly", "SameSite=Strict", "Secure", "Path=/console"} {
			if !strings.Contains(sc, want) {
				t.Errorf("session cookie %q lacks %s", sc, want)
			}
		}
		resp, _ = newBrowser(t, base).do("POST", "/console/login", url.Values{"key": {keyA}}, nil)
		if sc := resp.Header.Get("Set-Cookie"); strings.Contains(sc, "Secure") {
			t.Errorf("over plain http the cookie is Secure (the browser would drop it): %q", sc)
		}
	})

	t.Run("CSRF", func(t *testing.T) {
		for _, c := range []struct {
			name string
			form url.Values
			hdr  map[string]string
		}{
			{"no token", url.Values{}, nil},
			{"wrong token", url.Values{"csrf": {strings.Repeat("0", 64)}}, nil},
			{"another session's token", url.Values{"csrf": {func() string { o := newBrowser(t, base); o.signIn(keyA); return o.csrf() }()}}, nil},
			{"cross-site with the token", url.Values{"csrf": {tok}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
			{"foreign origin with the token", url.Values{"csrf": {tok}}, map[string]string{"Origin": "http://evil.example"}},
		} {
			for _, act := range []string{"kill", "pause", "timeout", "snapshot", "run"} {
				form := url.Values{"seconds": {"5"}, "cmd": {"true"}}
				for k, v := range c.form {
					form[k] = v
				}
				resp, _ := a.do("POST", "/console/sandboxes/"+sbA+"/"+act, form, c.hdr)
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s: %s answered %d, want 403", c.name, act, resp.StatusCode)
				}
			}
			if resp, _ := a.do("POST", "/console/logout", c.form, c.hdr); resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: logout answered %d, want 403", c.name, resp.StatusCode)
			}
		}
		// Login CSRF: another site signing this browser into its team.
		if resp, _ := newBrowser(t, base).do("POST", "/console/login", url.Values{"key": {keyB}}, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden {
			t.Errorf("cross-site sign-in: %d, want 403", resp.StatusCode)
		}
		// The sandbox is still there and running after all of that.
		var d struct {
			State string `json:"state"`
		}
		if st := apiCall(t, base, keyA, "GET", "/sandboxes/"+sbA, "", &d); st != 200 || d.State != "running" {
			t.Errorf("after the refused requests the sandbox is %d %q", st, d.State)
		}
	})

	t.Run("another team", func(t *testing.T) {
		b := newBrowser(t, base)
		b.signIn(keyB)
		tokB := b.csrf()
		for _, p := range []string{"/console/sandboxes/" + sbA, "/console/sandboxes/" + sbA + "/download?path=/etc/hostname", "/console/api/sandboxes/" + sbA + "/metrics"} {
			if resp, body := b.do("GET", p, nil, nil); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "purpose") {
				t.Errorf("team B GET %s: %d, want 404", p, resp.StatusCode)
			}
		}
		for _, act := range []string{"kill", "pause", "timeout", "snapshot", "run"} {
			if resp, _ := b.do("POST", "/console/sandboxes/"+sbA+"/"+act, url.Values{"csrf": {tokB}, "seconds": {"5"}, "cmd": {"true"}}, nil); resp.StatusCode != http.StatusNotFound {
				t.Errorf("team B %s of team A's sandbox: %d, want 404", act, resp.StatusCode)
			}
		}
		if _, body := b.do("GET", "/console/api/sandboxes", nil, nil); strings.Contains(body, sbA) {
			t.Errorf("team B's list shows team A's sandbox: %s", body)
		}
		if _, body := b.do("GET", "/console/", nil, nil); strings.Contains(body, sbA) {
			t.Errorf("team B's page shows team A's sandbox")
		}
	})

	t.Run("no key in any page", func(t *testing.T) {
		for _, p := range []string{"/console/", "/console/sandboxes/" + sbA, "/console/templates", "/console/snapshots", "/console/usage", "/console/api/sandboxes", "/console/api/sandboxes/" + sbA + "/metrics", "/console/static/app.js", "/console/nope"} {
			resp, body := a.do("GET", p, nil, nil)
			if resp.StatusCode >= 500 {
				t.Errorf("GET %s: %d", p, resp.StatusCode)
			}
			if strings.Contains(body, keyA) || strings.Contains(body, strings.TrimPrefix(keyA, "e2b_")) {
				t.Errorf("GET %s shows the API key", p)
			}
			for h, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"} {
				if resp.Header.Get(h) != want {
					t.Errorf("GET %s: %s %q, want %q", p, h, resp.Header.Get(h), want)
				}
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
				t.Errorf("GET %s: CSP %q", p, csp)
			}
		}
	})

	t.Run("XSS through metadata", func(t *testing.T) {
		_, body := a.do("GET", "/console/sandboxes/"+sbA, nil, nil)
		if strings.Contains(body, "<img src=x") || !strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;") {
			t.Errorf("the metadata is not escaped in the sandbox's page")
		}
	})

	t.Run("XSS through files, output and processes", func(t *testing.T) {
		// What code in the sandbox controls: a file's name, a command's
		// output, a process's command line.
		evil := `<img src=x onerror=alert(1)>`
		cmd := `mkdir -p /tmp/x && touch "/tmp/x/` + evil + `.txt" && echo '` + evil + `' && (sleep 30 &) && exec -a '` + evil + `' sleep 0`
		resp, body := a.do("POST", "/console/sandboxes/"+sbA+"/run", url.Values{"csrf": {tok}, "cmd": {cmd}}, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("run: %d", resp.StatusCode)
		}
		_, listing := a.do("GET", "/console/sandboxes/"+sbA+"?path=/tmp/x", nil, nil)
		for what, page := range map[string]string{"the output": body, "the file list": listing} {
			if strings.Contains(page, evil) {
				t.Errorf("%s carries the markup unescaped", what)
			}
			if !strings.Contains(page, "&lt;img src=x onerror=alert(1)&gt;") {
				t.Errorf("%s lacks the escaped name: %.400s", what, page)
			}
		}
	})

	t.Run("tunnel host never reaches the console", func(t *testing.T) {
		for _, hdr := range []map[string]string{
			{"Host": "49983-" + sbA + ".localhost"},
			{"Host": "8080-" + sbA + "." + host},
			{"E2b-Sandbox-Id": sbA},
		} {
			resp, body := a.do("GET", "/console/", nil, hdr)
			if strings.Contains(body, "csrf") || strings.Contains(resp.Header.Get("Content-Type"), "text/html") && strings.Contains(body, "Sandboxes") {
				t.Errorf("%v reached the console: %d", hdr, resp.StatusCode)
			}
			resp, _ = a.do("POST", "/console/login", url.Values{"key": {keyA}}, hdr)
			if strings.Contains(resp.Header.Get("Set-Cookie"), "cs_console") {
				t.Errorf("%v: sign-in through a sandbox's tunnel set a session cookie", hdr)
			}
		}
	})

	t.Run("the API still answers SDKs", func(t *testing.T) {
		if st := apiCall(t, base, keyA, "GET", "/v2/sandboxes", "", nil); st != 200 {
			t.Errorf("GET /v2/sandboxes with the key: %d", st)
		}
		req, _ := http.NewRequest("GET", base+"/", nil)
		req.Header.Set("X-API-Key", keyA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET / with an API key: %d, want the API's 404", resp.StatusCode)
		}
	})

	t.Run("sign-in refusals say what to do", func(t *testing.T) {
		resp, body := newBrowser(t, base).do("POST", "/console/login", url.Values{"key": {"e2b_" + strings.Repeat("9", 40)}}, nil)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "--api-key-file") {
			t.Errorf("wrong key: %d %.200s", resp.StatusCode, body)
		}
	})
}
