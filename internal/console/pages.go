package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Bounds of what one page does in a sandbox.
const (
	maxUpload    = 512 << 20 // one file uploaded through the page
	maxRunOutput = 256 << 10 // output of a command run from the page, shown
	runTimeout   = 60 * time.Second
	maxDirList   = 2000 // entries of a directory listed
	maxKeyForm   = 4 << 10
	maxListPages = 50 // of 100 sandboxes each, listed on one page
)

var idPattern = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

var funcs = template.FuncMap{
	"bytes": humanBytes,
	"pct":   func(f float64) string { return strconv.FormatFloat(f, 'f', 0, 64) + "%" },
	"dur":   humanDuration,
	"join":  strings.Join,
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 0, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 0, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

func humanDuration(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	d = d.Round(time.Second)
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd %dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh %dm", d/time.Hour, d%time.Hour/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%dm %ds", d/time.Minute, d%time.Minute/time.Second)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.Handle("GET /console/static/", c.static)
	m.HandleFunc("GET /console/login", c.loginPage)
	m.HandleFunc("POST /console/login", c.login)
	m.HandleFunc("POST /console/logout", c.post(c.logout))
	m.HandleFunc("GET /console/{$}", c.get(c.sandboxesPage))
	m.HandleFunc("GET /console/api/sandboxes", c.api(c.sandboxesJSON))
	m.HandleFunc("GET /console/sandboxes/{id}", c.get(c.sandboxPage))
	m.HandleFunc("GET /console/api/sandboxes/{id}/metrics", c.api(c.metricsJSON))
	m.HandleFunc("GET /console/sandboxes/{id}/download", c.get(c.download))
	m.HandleFunc("POST /console/sandboxes/{id}/upload", c.upload)
	m.HandleFunc("POST /console/sandboxes/{id}/{action}", c.post(c.action))
	m.HandleFunc("GET /console/templates", c.get(c.templatesPage))
	m.HandleFunc("GET /console/snapshots", c.get(c.snapshotsPage))
	m.HandleFunc("GET /console/usage", c.get(c.usagePage))
	m.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		c.errorPage(w, r, nil, http.StatusNotFound, "There is no such page in the console. Go to the sandboxes list.")
	})
	c.mux = m
}

// session finds the request's session; nil when there is none, it
// expired, or its key is no longer accepted (then it ends).
func (c *Console) session(r *http.Request) (*session, string) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return nil, ""
	}
	se := c.sessions.get(ck.Value, c.now())
	if se == nil {
		return nil, ""
	}
	if team, ok := c.team(se.key); !ok || team != se.team {
		c.sessions.delete(ck.Value)
		return nil, ""
	}
	return se, ck.Value
}

type handler func(w http.ResponseWriter, r *http.Request, se *session)

// get serves a page to a session; without one, the sign-in page.
func (c *Console) get(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se, _ := c.session(r)
		if se == nil {
			http.Redirect(w, r, "/console/login", http.StatusSeeOther)
			return
		}
		h(w, r, se)
	}
}

// api serves JSON to a session's scripts; without one, 401.
func (c *Console) api(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se, _ := c.session(r)
		if se == nil {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "not signed in: sign in again at /console/login"})
			return
		}
		h(w, r, se)
	}
}

// checkPost is what every state-changing request passes: a session, a
// same-origin request, and the session's CSRF token.
func (c *Console) checkPost(w http.ResponseWriter, r *http.Request, token string) (*session, bool) {
	se, _ := c.session(r)
	if se == nil {
		c.errorPage(w, r, nil, http.StatusUnauthorized, "You are not signed in (or your session expired). Sign in again.")
		return nil, false
	}
	if !sameOrigin(r) || !tokenEqual(token, se.csrf) {
		c.log.Warn("console: refused a cross-site or tokenless request", "team", se.team, "path", r.URL.Path)
		c.errorPage(w, r, se, http.StatusForbidden, "This request did not come from a console page (its CSRF token is missing or wrong). Reload the page and try again.")
		return nil, false
	}
	return se, true
}

func (c *Console) post(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		tok := r.Header.Get("X-CSRF-Token")
		if tok == "" {
			tok = r.PostFormValue("csrf")
		}
		se, ok := c.checkPost(w, r, tok)
		if !ok {
			return
		}
		h(w, r, se)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// page is what every template gets.
type page struct {
	Title   string
	Team    string
	CSRF    string
	Nav     string
	Error   string
	Notice  string
	Data    any
	Elapsed string
}

func (c *Console) render(w http.ResponseWriter, status int, name string, p page) {
	var buf bytes.Buffer
	if err := c.pages.ExecuteTemplate(&buf, name, p); err != nil {
		c.log.Error("console: rendering", "page", name, "error", err)
		http.Error(w, "the console could not render this page; see serve's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, se *session, status int, msg string) {
	p := page{Title: http.StatusText(status), Error: msg}
	if se != nil {
		p.Team, p.CSRF = se.team, se.csrf
	}
	c.render(w, status, "error.html", p)
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if se, _ := c.session(r); se != nil {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	c.render(w, http.StatusOK, "login.html", page{Title: "Sign in"})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	// Login CSRF: another site must not sign a browser into its own team.
	if !sameOrigin(r) {
		c.render(w, http.StatusForbidden, "login.html", page{Title: "Sign in", Error: "This sign-in did not come from this server's sign-in page. Open the console's address yourself and sign in there."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxKeyForm)
	key := strings.TrimSpace(r.PostFormValue("key"))
	team, ok := c.team(key)
	if !ok {
		c.log.Info("console: sign-in refused", "remote", r.RemoteAddr)
		c.render(w, http.StatusUnauthorized, "login.html", page{Title: "Sign in", Error: "This server does not accept that API key. Use a key from serve's --api-key or --api-key-file (e2b_ followed by 40 hex digits)."})
		return
	}
	// A fresh id at every sign-in, whatever cookie the browser had: an id
	// planted before sign-in (session fixation) never becomes a session.
	if ck, err := r.Cookie(cookieName); err == nil {
		c.sessions.delete(ck.Value)
	}
	id, ok := c.sessions.create(team, key, c.now())
	if !ok {
		c.render(w, http.StatusServiceUnavailable, "login.html", page{Title: "Sign in", Error: "Too many people are signed in to this console right now; try again in a few minutes."})
		return
	}
	c.log.Info("console: signed in", "team", team, "remote", r.RemoteAddr)
	setSessionCookie(w, r, id)
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, se *session) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.sessions.delete(ck.Value)
	}
	clearSessionCookie(w, r)
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}
