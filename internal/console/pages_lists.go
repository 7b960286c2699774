// The list pages: sandboxes (and their JSON), templates, snapshots and
// usage.

package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

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
