package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/errgroup"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem/filesystemconnect"
	procpb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/process/processconnect"
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

// listed is the API's ListedSandbox and the detail's network fields.
type listed struct {
	TemplateID string            `json:"templateID"`
	SandboxID  string            `json:"sandboxID"`
	Alias      string            `json:"alias"`
	StartedAt  time.Time         `json:"startedAt"`
	EndAt      time.Time         `json:"endAt"`
	CPUCount   int               `json:"cpuCount"`
	MemoryMB   int64             `json:"memoryMB"`
	State      string            `json:"state"`
	Metadata   map[string]string `json:"metadata"`
	// detail only
	EnvdAccessToken     string `json:"envdAccessToken"`
	AllowInternetAccess bool   `json:"allowInternetAccess"`
	Network             *struct {
		AllowOut           []string `json:"allowOut"`
		DenyOut            []string `json:"denyOut"`
		AllowPublicTraffic bool     `json:"allowPublicTraffic"`
	} `json:"network"`
	Lifecycle struct {
		AutoResume bool   `json:"autoResume"`
		OnTimeout  string `json:"onTimeout"`
	} `json:"lifecycle"`
}

type metric struct {
	CPUCount   int     `json:"cpuCount"`
	CPUUsedPct float64 `json:"cpuUsedPct"`
	MemUsed    int64   `json:"memUsed"`
	MemTotal   int64   `json:"memTotal"`
	DiskUsed   int64   `json:"diskUsed"`
}

// row is one sandbox of the list, as the page and its script show it.
type row struct {
	ID       string  `json:"id"`
	Template string  `json:"template"`
	State    string  `json:"state"`
	Age      string  `json:"age"`
	Left     string  `json:"left"`
	Network  string  `json:"network"`
	CPU      string  `json:"cpu"`
	Memory   string  `json:"memory"`
	CPUPct   float64 `json:"cpuPct"`
	MemUsed  int64   `json:"memUsed"`
}

func networkOf(l *listed) string {
	switch {
	case l.Network != nil && len(l.Network.AllowOut) > 0:
		return "allowlist: " + strings.Join(l.Network.AllowOut, ", ")
	case l.Network != nil && len(l.Network.DenyOut) > 0 && l.AllowInternetAccess:
		return "all but: " + strings.Join(l.Network.DenyOut, ", ")
	case l.AllowInternetAccess:
		return "all"
	}
	return "none"
}

// detailFetches bounds the sandbox details one page load asks the API for
// at once.
const detailFetches = 8

// rows lists the team's sandboxes with their network and a fresh sample of
// CPU and memory each (which also feeds the charts' history).
func (c *Console) rows(ctx context.Context, se *session) ([]row, error) {
	var ls []listed
	next := ""
	for range maxListPages {
		var page []listed
		p := "/v2/sandboxes?state=running,paused&limit=100"
		if next != "" {
			p += "&nextToken=" + url.QueryEscape(next)
		}
		h, err := c.b.callHeader(ctx, se.key, "GET", p, nil, &page)
		if err != nil {
			return nil, err
		}
		ls = append(ls, page...)
		if next = h.Get("X-Next-Token"); next == "" {
			break
		}
	}
	slices.SortFunc(ls, func(a, b listed) int { return b.StartedAt.Compare(a.StartedAt) })
	ms := map[string]metric{}
	var running []string
	for _, l := range ls {
		if l.State == "running" {
			running = append(running, l.SandboxID)
		}
	}
	for len(running) > 0 {
		n := min(len(running), 100) // the API's most at once
		var out struct {
			Sandboxes map[string]metric `json:"sandboxes"`
		}
		if err := c.b.call(ctx, se.key, "GET", query("/sandboxes/metrics", "sandbox_ids", strings.Join(running[:n], ",")), nil, &out); err == nil {
			for id, m := range out.Sandboxes {
				ms[id] = m
			}
		}
		running = running[n:]
	}
	// The list has no network rules; each sandbox's details do. Fetched a
	// few at a time: one after another, 200 sandboxes held the page's
	// first paint back by 200 round trips through the API.
	netws := make([]string, len(ls))
	var g errgroup.Group
	g.SetLimit(detailFetches)
	for i := range ls {
		g.Go(func() error {
			var d listed
			netws[i] = "?"
			if err := c.b.call(ctx, se.key, "GET", "/sandboxes/"+ls[i].SandboxID, nil, &d); err == nil {
				netws[i] = networkOf(&d)
			}
			return nil
		})
	}
	_ = g.Wait() // no call fails the page: a row shows "?"
	now := c.now()
	rows := make([]row, 0, len(ls))
	for i := range ls {
		l := &ls[i]
		netw := netws[i]
		rw := row{ID: l.SandboxID, Template: l.TemplateID, State: l.State, Age: humanDuration(now.Sub(l.StartedAt)), Network: netw,
			CPU: "—", Memory: "—"}
		if l.Alias != "" {
			rw.Template = l.Alias
		}
		rw.Left = "—"
		if l.State == "running" {
			rw.Left = humanDuration(l.EndAt.Sub(now))
		}
		if m, ok := ms[l.SandboxID]; ok {
			rw.CPUPct, rw.MemUsed = m.CPUUsedPct, m.MemUsed
			rw.CPU = fmt.Sprintf("%.0f%% of %d", m.CPUUsedPct, m.CPUCount)
			rw.Memory = humanBytes(m.MemUsed) + " / " + humanBytes(m.MemTotal)
			c.history.add(se.team, l.SandboxID, point{T: now.UnixMilli(), CPU: m.CPUUsedPct, Mem: m.MemUsed, MemMax: m.MemTotal}, now)
		}
		rows = append(rows, rw)
	}
	return rows, nil
}

func (c *Console) sandboxesPage(w http.ResponseWriter, r *http.Request, se *session) {
	start := time.Now()
	rows, err := c.rows(r.Context(), se)
	p := page{Title: "Sandboxes", Team: se.team, CSRF: se.csrf, Nav: "sandboxes", Data: rows}
	if err != nil {
		p.Error = "Listing the sandboxes failed: " + err.Error()
	}
	if r.URL.Query().Get("done") == "kill" {
		p.Notice = "The sandbox was killed."
	}
	p.Elapsed = time.Since(start).Round(time.Millisecond).String()
	c.render(w, http.StatusOK, "sandboxes.html", p)
}

func (c *Console) sandboxesJSON(w http.ResponseWriter, r *http.Request, se *session) {
	rows, err := c.rows(r.Context(), se)
	if err != nil {
		writeJSON(w, statusOf(err), map[string]string{"message": "listing the sandboxes failed: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": rows})
}

// sandbox finds the team's sandbox of the request's {id} through the API:
// another team's is "not found" there, and so here.
func (c *Console) sandbox(w http.ResponseWriter, r *http.Request, se *session) (*listed, bool) {
	id := r.PathValue("id")
	if !idPattern.MatchString(id) {
		c.errorPage(w, r, se, http.StatusNotFound, "There is no sandbox of that name. Go back to the sandboxes list.")
		return nil, false
	}
	var d listed
	if err := c.b.call(r.Context(), se.key, "GET", "/sandboxes/"+id, nil, &d); err != nil {
		if statusOf(err) == http.StatusNotFound {
			c.errorPage(w, r, se, http.StatusNotFound, "Your team has no sandbox "+id+" (it was killed, timed out, or is another team's). Go back to the sandboxes list.")
		} else {
			c.errorPage(w, r, se, statusOf(err), "Reading sandbox "+id+" failed: "+err.Error())
		}
		return nil, false
	}
	return &d, true
}

func (c *Console) envd(d *listed) *sandboxClient {
	return &sandboxClient{b: c.b, id: d.SandboxID, token: d.EnvdAccessToken}
}

type fileEntry struct {
	Name, Path, Size string
	Dir              bool
}

type detail struct {
	S         *listed
	Network   string
	Age, Left string
	Procs     []procRow
	ProcErr   string
	Dir       string
	Parent    string
	Files     []fileEntry
	FilesErr  string
	Truncated bool
	Ran       *runResult
	Meta      []string
}

type procRow struct {
	PID  uint32
	Cmd  string
	Tag  string
	Cwd  string
	Args string
}

type runResult struct {
	Cmd    string
	Output string
	Exit   string
	Cut    bool
}

func (c *Console) sandboxPage(w http.ResponseWriter, r *http.Request, se *session) {
	d, ok := c.sandbox(w, r, se)
	if !ok {
		return
	}
	c.renderSandbox(w, r, se, d, nil, http.StatusOK, "", noticeOf(r.URL.Query().Get("done")))
}

func noticeOf(done string) string {
	switch done {
	case "pause":
		return "The sandbox is paused."
	case "resume":
		return "The sandbox is running again."
	case "timeout":
		return "The timeout was set."
	case "snapshot":
		return "A snapshot was taken (see Snapshots)."
	case "upload":
		return "The file was uploaded."
	}
	return ""
}

func (c *Console) renderSandbox(w http.ResponseWriter, r *http.Request, se *session, d *listed, ran *runResult, status int, errMsg, notice string) {
	now := c.now()
	v := detail{S: d, Network: networkOf(d), Age: humanDuration(now.Sub(d.StartedAt)), Left: "—", Ran: ran}
	if d.State == "running" {
		v.Left = humanDuration(d.EndAt.Sub(now))
	}
	for k, val := range d.Metadata {
		v.Meta = append(v.Meta, k+"="+val)
	}
	slices.Sort(v.Meta)
	v.Dir = r.URL.Query().Get("path")
	if v.Dir == "" {
		v.Dir = "/home/user"
	}
	v.Dir = path.Clean("/" + v.Dir)
	if v.Dir != "/" {
		v.Parent = path.Dir(v.Dir)
	}
	if d.State == "running" {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		pc := processconnect.NewProcessClient(c.envd(d), "http://console", connect.WithProtoJSON())
		if res, err := pc.List(ctx, connect.NewRequest(&procpb.ListRequest{})); err != nil {
			v.ProcErr = "Listing the processes failed: " + err.Error()
		} else {
			for _, p := range res.Msg.GetProcesses() {
				cfg := p.GetConfig()
				v.Procs = append(v.Procs, procRow{PID: p.GetPid(), Cmd: cfg.GetCmd(), Args: strings.Join(cfg.GetArgs(), " "), Tag: p.GetTag(), Cwd: cfg.GetCwd()})
			}
		}
		fc := filesystemconnect.NewFilesystemClient(c.envd(d), "http://console", connect.WithProtoJSON())
		if res, err := fc.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: v.Dir, Depth: 1})); err != nil {
			v.FilesErr = "Listing " + v.Dir + " failed: " + err.Error() + ". Give a directory that exists in the sandbox."
		} else {
			for _, e := range res.Msg.GetEntries() {
				if len(v.Files) >= maxDirList {
					v.Truncated = true
					break
				}
				v.Files = append(v.Files, fileEntry{Name: e.GetName(), Path: e.GetPath(), Size: humanBytes(e.GetSize()), Dir: e.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY})
			}
			slices.SortFunc(v.Files, func(a, b fileEntry) int {
				if a.Dir != b.Dir {
					if a.Dir {
						return -1
					}
					return 1
				}
				return strings.Compare(a.Name, b.Name)
			})
		}
	}
	c.render(w, status, "sandbox.html", page{Title: "Sandbox " + d.SandboxID, Team: se.team, CSRF: se.csrf, Nav: "sandboxes", Error: errMsg, Notice: notice, Data: v})
}

func (c *Console) metricsJSON(w http.ResponseWriter, r *http.Request, se *session) {
	id := r.PathValue("id")
	if !idPattern.MatchString(id) {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "no such sandbox"})
		return
	}
	var ms []metric // E2B's answer: the samples in [start, end], here one, taken now
	err := c.b.call(r.Context(), se.key, "GET", "/sandboxes/"+id+"/metrics", nil, &ms)
	if err != nil && statusOf(err) == http.StatusNotFound {
		c.history.forget(id)
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "your team has no sandbox " + id})
		return
	}
	now := c.now()
	if err == nil && len(ms) > 0 {
		m := ms[len(ms)-1]
		c.history.add(se.team, id, point{T: now.UnixMilli(), CPU: m.CPUUsedPct, Mem: m.MemUsed, MemMax: m.MemTotal}, now)
	}
	writeJSON(w, http.StatusOK, map[string]any{"points": c.history.get(se.team, id)})
}

func (c *Console) action(w http.ResponseWriter, r *http.Request, se *session) {
	d, ok := c.sandbox(w, r, se)
	if !ok {
		return
	}
	id, act := d.SandboxID, r.PathValue("action")
	ctx := r.Context()
	var err error
	switch act {
	case "kill":
		if err = c.b.call(ctx, se.key, "DELETE", "/sandboxes/"+id, nil, nil); err == nil {
			c.history.forget(id)
			http.Redirect(w, r, "/console/?done=kill", http.StatusSeeOther)
			return
		}
	case "pause":
		err = c.b.call(ctx, se.key, "POST", "/sandboxes/"+id+"/pause", nil, nil)
	case "resume":
		err = c.b.call(ctx, se.key, "POST", "/sandboxes/"+id+"/connect", map[string]int{"timeout": 300}, nil)
	case "timeout":
		secs, perr := strconv.Atoi(r.PostFormValue("seconds"))
		if perr != nil || secs < 1 {
			c.renderSandbox(w, r, se, d, nil, http.StatusBadRequest, "Give the new timeout as a whole number of seconds from now, e.g. 600.", "")
			return
		}
		err = c.b.call(ctx, se.key, "POST", "/sandboxes/"+id+"/timeout", map[string]int{"timeout": secs}, nil)
	case "snapshot":
		err = c.b.call(ctx, se.key, "POST", "/sandboxes/"+id+"/snapshots", map[string]string{}, nil)
	case "run":
		c.run(w, r, se, d)
		return
	default:
		c.errorPage(w, r, se, http.StatusNotFound, "There is no action "+act+"; use the buttons of the sandbox's page.")
		return
	}
	if err != nil {
		c.renderSandbox(w, r, se, d, nil, statusOf(err), "The "+act+" failed: "+err.Error(), "")
		return
	}
	http.Redirect(w, r, "/console/sandboxes/"+id+"?done="+act, http.StatusSeeOther)
}

// run runs a command line in the sandbox with bash -lc, as the
// sandbox's default user, and shows its output (bounded) when it ends or
// after runTimeout.
func (c *Console) run(w http.ResponseWriter, r *http.Request, se *session, d *listed) {
	line := r.PostFormValue("cmd")
	if strings.TrimSpace(line) == "" {
		c.renderSandbox(w, r, se, d, nil, http.StatusBadRequest, "Type a command to run, e.g. ls -la.", "")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), runTimeout)
	defer cancel()
	pc := processconnect.NewProcessClient(c.envd(d), "http://console", connect.WithProtoJSON())
	stream, err := pc.Start(ctx, connect.NewRequest(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", line}}}))
	if err != nil {
		c.renderSandbox(w, r, se, d, nil, http.StatusBadGateway, "Starting the command failed: "+err.Error(), "")
		return
	}
	defer stream.Close()
	res := &runResult{Cmd: line, Exit: "still running after " + runTimeout.String() + " (left running; its output is cut here)"}
	var out bytes.Buffer
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if dt := ev.GetData(); dt != nil {
			b := append(dt.GetStdout(), dt.GetStderr()...)
			if room := maxRunOutput - out.Len(); room < len(b) {
				b, res.Cut = b[:max(room, 0)], true
			}
			out.Write(b)
		}
		if end := ev.GetEnd(); end != nil {
			res.Exit = "exit code " + strconv.Itoa(int(end.GetExitCode()))
			if end.GetError() != "" {
				res.Exit += ": " + end.GetError()
			}
			break
		}
	}
	if err := stream.Err(); err != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res.Exit = "the stream broke: " + err.Error()
	}
	res.Output = strings.ToValidUTF8(out.String(), "\uFFFD")
	c.renderSandbox(w, r, se, d, res, http.StatusOK, "", "")
}

func (c *Console) download(w http.ResponseWriter, r *http.Request, se *session) {
	d, ok := c.sandbox(w, r, se)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		c.errorPage(w, r, se, http.StatusBadRequest, "Say which file to download (the path parameter).")
		return
	}
	req, err := newRequest(r.Context(), "GET", query("/files", "path", p), nil)
	if err != nil {
		c.errorPage(w, r, se, http.StatusBadRequest, "That path can't be downloaded: "+err.Error())
		return
	}
	resp, err := c.envd(d).Do(req)
	if err != nil {
		c.errorPage(w, r, se, http.StatusBadGateway, "Downloading failed: "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		c.errorPage(w, r, se, resp.StatusCode, "Downloading "+p+" failed: "+strings.TrimSpace(string(msg)))
		return
	}
	// Always an attachment of an opaque type: a file a sandbox wrote is
	// never rendered on the console's origin (it could be HTML with script).
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment; filename*=UTF-8''"+strings.ReplaceAll(urlPathEscape(path.Base(p)), "'", "%27"))
	w.Header().Set("Content-Security-Policy", "default-src 'none'; sandbox")
	_, _ = io.Copy(w, resp.Body)
}

func urlPathEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// upload takes a multipart form whose first part is the CSRF token, then
// the directory, then the file, and streams the file into the sandbox:
// nothing is spooled to the server's disk.
func (c *Console) upload(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	mr, err := r.MultipartReader()
	if err != nil {
		c.checkPost(w, r, "")
		return
	}
	field := func(name string) (string, bool) {
		p, err := mr.NextPart()
		if err != nil || p.FormName() != name {
			return "", false
		}
		b, err := io.ReadAll(io.LimitReader(p, 4<<10))
		return string(b), err == nil
	}
	tok, _ := field("csrf")
	se, ok := c.checkPost(w, r, tok)
	if !ok {
		return
	}
	d, ok := c.sandbox(w, r, se)
	if !ok {
		return
	}
	dir, ok1 := field("dir")
	part, err := mr.NextPart()
	if !ok1 || err != nil || part.FormName() != "file" || part.FileName() == "" {
		c.renderSandbox(w, r, se, d, nil, http.StatusBadRequest, "Choose a file to upload.", "")
		return
	}
	name := path.Base(part.FileName())
	dest := path.Join(path.Clean("/"+dir), name)
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("file", name)
		if err == nil {
			_, err = io.Copy(fw, part)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := newRequest(r.Context(), "POST", query("/files", "path", dest), pr)
	if err == nil {
		req.Header.Set("Content-Type", mw.FormDataContentType())
		var resp *http.Response
		if resp, err = c.envd(d).Do(req); err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				err = fmt.Errorf("%d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
			}
		}
	}
	pr.CloseWithError(errors.New("upload ended"))
	if err != nil {
		c.renderSandbox(w, r, se, d, nil, http.StatusBadGateway, "Uploading "+name+" failed: "+err.Error()+". Check that the directory exists and is writable by the sandbox's user.", "")
		return
	}
	http.Redirect(w, r, "/console/sandboxes/"+d.SandboxID+"?done=upload&path="+urlPathEscape(path.Dir(dest)), http.StatusSeeOther)
}

func (c *Console) templatesPage(w http.ResponseWriter, r *http.Request, se *session) {
	var ts []map[string]any
	p := page{Title: "Templates", Team: se.team, CSRF: se.csrf, Nav: "templates"}
	if err := c.b.call(r.Context(), se.key, "GET", "/templates", nil, &ts); err != nil {
		p.Error = "Listing the templates failed: " + err.Error()
	}
	p.Data = flatten(ts, "templateID", "aliases", "names", "buildStatus", "cpuCount", "memoryMB", "createdAt", "updatedAt", "spawnCount")
	c.render(w, http.StatusOK, "table.html", p)
}

func (c *Console) snapshotsPage(w http.ResponseWriter, r *http.Request, se *session) {
	var ss []map[string]any
	p := page{Title: "Snapshots", Team: se.team, CSRF: se.csrf, Nav: "snapshots"}
	if err := c.b.call(r.Context(), se.key, "GET", "/snapshots", nil, &ss); err != nil {
		p.Error = "Listing the snapshots failed: " + err.Error()
	}
	p.Data = flatten(ss, "snapshotID", "names", "sandboxID", "templateID", "createdAt")
	c.render(w, http.StatusOK, "table.html", p)
}

type table struct {
	Cols []string
	Rows [][]string
}

// flatten shows chosen fields of JSON objects as text cells.
func flatten(objs []map[string]any, cols ...string) table {
	t := table{Cols: cols}
	for _, o := range objs {
		var cells []string
		for _, k := range cols {
			switch v := o[k].(type) {
			case nil:
				cells = append(cells, "")
			case string:
				cells = append(cells, v)
			case []any:
				var parts []string
				for _, x := range v {
					parts = append(parts, fmt.Sprint(x))
				}
				cells = append(cells, strings.Join(parts, ", "))
			default:
				cells = append(cells, fmt.Sprint(v))
			}
		}
		t.Rows = append(t.Rows, cells)
	}
	return t
}

// usagePage is what the team holds now against serve's quotas (the
// quotas themselves are serve's flags and the key file's fields; the API
// does not tell them, so the page says where they are set).
func (c *Console) usagePage(w http.ResponseWriter, r *http.Request, se *session) {
	p := page{Title: "Usage", Team: se.team, CSRF: se.csrf, Nav: "usage"}
	ctx := r.Context()
	var running, paused, cpus int
	var memMB int64
	next := ""
	for range maxListPages {
		var ls []listed
		q := "/v2/sandboxes?state=running,paused&limit=100"
		if next != "" {
			q += "&nextToken=" + url.QueryEscape(next)
		}
		h, err := c.b.callHeader(ctx, se.key, "GET", q, nil, &ls)
		if err != nil {
			p.Error = "Listing the sandboxes failed: " + err.Error()
			break
		}
		for _, l := range ls {
			if l.State == "paused" {
				paused++
				continue
			}
			running++
			cpus += l.CPUCount
			memMB += l.MemoryMB
		}
		if next = h.Get("X-Next-Token"); next == "" {
			break
		}
	}
	var snaps, tmpls []json.RawMessage
	snapText, tmplText := "?", "?"
	if err := c.b.call(ctx, se.key, "GET", "/snapshots", nil, &snaps); err == nil {
		snapText = strconv.Itoa(len(snaps))
	}
	if err := c.b.call(ctx, se.key, "GET", "/templates", nil, &tmpls); err == nil {
		tmplText = strconv.Itoa(len(tmpls))
	}
	p.Data = table{Cols: []string{"What", "Your team holds", "Bounded by"}, Rows: [][]string{
		{"Running sandboxes", strconv.Itoa(running), "serve --max-sandboxes, or sandboxes= of your key's line in --api-key-file"},
		{"Memory of the running sandboxes (their limits)", humanBytes(memMB << 20), "--max-total-memory, or total-memory="},
		{"CPUs of the running sandboxes (their limits)", strconv.Itoa(cpus), "--max-total-cpu, or total-cpu="},
		{"Paused sandboxes", strconv.Itoa(paused), "--max-paused"},
		{"Snapshots", snapText, "--max-snapshots"},
		{"Templates", tmplText, "--template-upload-quota (their files)"},
	}}
	c.render(w, http.StatusOK, "table.html", p)
}
