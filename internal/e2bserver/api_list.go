// Listing sandboxes: GET /sandboxes (v1) and GET /v2/sandboxes with its
// metadata filter and cursor, and what a listed sandbox shows.

package e2bserver

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
)

// listedSandbox is E2B's ListedSandbox; detail adds SandboxDetail's fields.
type listedSandbox struct {
	TemplateID   string            `json:"templateID"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	Alias        string            `json:"alias,omitempty"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int64             `json:"memoryMB"`
	DiskSizeMB   int64             `json:"diskSizeMB"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	Metadata     map[string]string `json:"metadata"`
	VolumeMounts []any             `json:"volumeMounts"`
}

func metadataOf(i sandboxes.Info) map[string]string {
	m := map[string]string{}
	for k, v := range i.Tags {
		if !strings.HasPrefix(k, tagPrefix) {
			m[k] = v
		}
	}
	return m
}

// hostMemoryMB is the memory a sandbox without a limit can use.
var hostMemoryMB = sync.OnceValue(func() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10
		}
	}
	return 0
})

func listed(i sandboxes.Info) listedSandbox {
	cpus := runtime.NumCPU()
	if i.CPUs > 0 {
		cpus = max(1, int(i.CPUs+0.999))
	}
	mem := hostMemoryMB()
	if i.Memory > 0 {
		mem = i.Memory >> 20
	}
	t := i.Tags[tagTemplate]
	state := "running"
	if i.Status == sandboxes.StatusPaused {
		state = "paused"
	}
	return listedSandbox{TemplateID: t, SandboxID: i.ID, ClientID: clientID, Alias: t,
		StartedAt: i.CreatedAt.UTC(), EndAt: i.EndAt.UTC(), CPUCount: cpus, MemoryMB: mem,
		// The sandbox's writable space: tmpfs /home/user, /files and /tmp.
		DiskSizeMB: (isolate.DefaultHomeSize + isolate.DefaultFilesSize + isolate.DefaultTmpSize) >> 20,
		State:      state, EnvdVersion: EnvdVersion, Metadata: metadataOf(i), VolumeMounts: []any{}}
}

// listV1 is the deprecated GET /sandboxes: every running sandbox, filtered by
// metadata, unpaginated.
func (s *Server) listV1(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	meta, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	infos, err := s.ours(r.Context(), caller(r).Team)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "listing sandboxes: %v", err)
		return
	}
	out := []listedSandbox{}
	for _, i := range infos {
		if matchMetadata(i, meta) {
			out = append(out, listed(i))
		}
	}
	slices.SortFunc(out, newestFirst)
	writeJSON(w, http.StatusOK, out)
}

func newestFirst(a, b listedSandbox) int {
	if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
		return c
	}
	return strings.Compare(a.SandboxID, b.SandboxID)
}

// parseMetadataQuery decodes the metadata filter: a query string inside a
// query parameter whose keys and values the SDKs additionally
// percent-encode (JS: encodeURIComponent, then URLSearchParams), so it is
// unescaped twice, as E2B's API does.
func parseMetadataQuery(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("metadata filter %q: %v (send key=value pairs joined by &)", raw, err)
	}
	out := map[string]string{}
	for k, vs := range vals {
		key, err := url.QueryUnescape(k)
		if err != nil {
			key = k // as for values below
		}
		for _, v := range vs {
			val, err := url.QueryUnescape(v)
			if err != nil {
				// Python's SDK encodes once, not twice: a value such as
				// "50%" arrives decoded already and is taken as it is.
				val = v
			}
			if old, dup := out[key]; dup && old != val {
				return nil, fmt.Errorf("metadata filter key %q is given twice with different values", key)
			}
			out[key] = val
		}
	}
	return out, nil
}

func matchMetadata(i sandboxes.Info, want map[string]string) bool {
	for k, v := range want {
		if strings.HasPrefix(k, tagPrefix) {
			return false
		}
		if got, ok := i.Tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

const (
	defaultListLimit = 100
	maxListLimit     = 100
)

// listV2 is GET /v2/sandboxes: metadata, state, template and startedAfter
// filters, newest first (order=asc reverses), limit plus X-Next-Token paging.
func (s *Server) listV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	meta, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	wantRunning, wantPaused := true, true // no state: every one
	if states := q["state"]; len(states) > 0 {
		wantRunning, wantPaused = false, false
		for _, st := range states {
			for p := range strings.SplitSeq(st, ",") {
				switch strings.TrimSpace(p) {
				case "running":
					wantRunning = true
				case "paused":
					wantPaused = true
				default:
					writeError(w, http.StatusBadRequest, "state %q is unknown; use running or paused", p)
					return
				}
			}
		}
	}
	limit := defaultListLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxListLimit {
			writeError(w, http.StatusBadRequest, "limit %q: give a number from 1 to %d", l, maxListLimit)
			return
		}
		limit = n
	}
	var after time.Time
	if sa := q.Get("startedAfter"); sa != "" {
		if after, err = time.Parse(time.RFC3339Nano, sa); err != nil {
			writeError(w, http.StatusBadRequest, "startedAfter %q: use an RFC 3339 time", sa)
			return
		}
	}
	asc := false
	switch o := strings.ToLower(q.Get("order")); o {
	case "", "desc":
	case "asc":
		asc = true
	default:
		writeError(w, http.StatusBadRequest, "order %q: use asc or desc", o)
		return
	}
	var cursor *listedSandbox
	if tok := q.Get("nextToken"); tok != "" {
		c, err := decodeCursor(tok)
		if err != nil {
			writeError(w, http.StatusBadRequest, "nextToken %q is invalid: pass the X-Next-Token of a previous answer", tok)
			return
		}
		cursor = &c
	}
	template := q.Get("template")

	out := []listedSandbox{}
	if wantRunning || wantPaused {
		infos, err := s.ours(r.Context(), caller(r).Team)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "listing sandboxes: %v", err)
			return
		}
		for _, i := range infos {
			if paused := i.Status == sandboxes.StatusPaused; (paused && !wantPaused) || (!paused && !wantRunning) {
				continue
			}
			if matchMetadata(i, meta) && (template == "" || i.Tags[tagTemplate] == template) && (after.IsZero() || i.CreatedAt.After(after)) {
				out = append(out, listed(i))
			}
		}
	}
	cmp := newestFirst
	if asc {
		cmp = func(a, b listedSandbox) int { return newestFirst(b, a) }
	}
	slices.SortFunc(out, cmp)
	if cursor != nil {
		// Resume strictly after the cursor, which need not exist any more
		// (killed since), so compare rather than look it up.
		n := 0
		for n < len(out) && cmp(out[n], *cursor) <= 0 {
			n++
		}
		out = out[n:]
	}
	if len(out) > limit {
		out = out[:limit]
		w.Header().Set("X-Next-Token", encodeCursor(out[limit-1]))
	}
	writeJSON(w, http.StatusOK, out)
}

// A cursor is the sort key of the last sandbox of a page.
func encodeCursor(l listedSandbox) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(l.StartedAt.UnixNano(), 10) + "." + l.SandboxID))
}

func decodeCursor(tok string) (listedSandbox, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return listedSandbox{}, err
	}
	ns, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || !sandboxIDPattern.MatchString(id) {
		return listedSandbox{}, errors.New("malformed cursor")
	}
	return listedSandbox{StartedAt: time.Unix(0, n).UTC(), SandboxID: id}, nil
}

func parseUnix(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) }
