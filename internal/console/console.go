// Package console is serve's web console: a team signs in with its API
// key and sees and steers its own sandboxes, templates and snapshots.
//
// Every page is rendered on the server from serve's own API, called in
// process with the session's key (backend.go): the console holds no
// authority of its own, so a team sees through it only what its key
// shows through the API. The key stays on the server; the browser holds
// a random session id in an HttpOnly, SameSite=Strict cookie, and every
// state-changing request also needs the session's CSRF token and a
// same-origin Sec-Fetch-Site/Origin. Pages load nothing from elsewhere
// (a strict CSP; the assets are embedded) and can't be framed.
package console

import (
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// Options configure a Console.
type Options struct {
	// Backend is serve's handler (control and data plane); the console's
	// calls go through it in process.
	Backend http.Handler
	// Team resolves an API key to its team, as serve's API does; ok false
	// for a key serve does not accept (now: keys are re-read on SIGHUP,
	// and a session whose key went away ends).
	Team func(key string) (team string, ok bool)
	// Logger receives sign-ins and refusals; nil = discard.
	Logger *slog.Logger
}

// Console is the web console's handler, for the paths Handles accepts.
type Console struct {
	b        *backend
	team     func(string) (string, bool)
	log      *slog.Logger
	sessions *sessions
	history  *history
	pages    *template.Template
	static   http.Handler
	mux      *http.ServeMux
	now      func() time.Time
}

// New returns a Console over o.Backend.
func New(o Options) *Console {
	c := &Console{b: &backend{h: o.Backend}, team: o.Team, log: o.Logger, sessions: &sessions{m: map[[32]byte]*session{}},
		history: newHistory(), now: time.Now}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.pages = template.Must(template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html"))
	sub, _ := fs.Sub(assets, "assets/static")
	c.static = http.StripPrefix("/console/static/", http.FileServer(http.FS(sub)))
	c.routes()
	return c
}

// Handles reports whether r is the console's: "/" (a browser's first
// visit) and everything under /console/. serve's API has no route there.
// The caller must have ruled out requests for a sandbox (a tunnel host or
// the SDKs' routing headers) first: those are the sandbox's, never ours.
func Handles(r *http.Request) bool {
	if r.URL.Path == "/" {
		return r.Method == http.MethodGet && r.Header.Get("X-API-Key") == ""
	}
	return r.URL.Path == "/console" || strings.HasPrefix(r.URL.Path, "/console/")
}

// ServeHTTP answers a console request.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Nothing from elsewhere, no inline script, no framing (clickjacking),
	// forms only to us, nothing cached (pages show a team's data).
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, "/console/static/") {
		h.Set("Cache-Control", "no-store")
	}
	if r.URL.Path == "/" || r.URL.Path == "/console" {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	c.mux.ServeHTTP(w, r)
}
