package e2bserver

// Snapshots and fork, E2B's way (POST /sandboxes/{id}/snapshots, GET
// /snapshots, DELETE /templates/{snapshotID}, a create whose templateID is
// a snapshot, POST /sandboxes/{id}/fork), on sandboxes.Sandbox.Snapshot:
// local variant under --isolation gvisor (501 with the reason elsewhere).
//
// A snapshot belongs to the team whose key took it: its name on disk is
// the team's prefix (a hash of the team, snapshotPrefix) and the name the
// team sees, so every lookup is within the caller's team and another
// team's key finds nothing (404), never another team's state. The names
// a team gives are checked (snapshotNameRE: no '/', '.', ':' or NUL ever
// reaches a path), and a team keeps at most MaxSnapshots.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/ids"
)

const (
	// defaultMaxSnapshots is Options.MaxSnapshots' default: each snapshot
	// is a checkpoint of a whole sandbox on disk (its memory: up to the
	// sandbox's limit).
	defaultMaxSnapshots = 20
	// snapshotTag is the only tag a snapshot has ("name:default"), as on
	// E2B, where a snapshot is a template.
	snapshotTag = ":default"
	// maxForks bounds a fork's count (E2B's SandboxForkRequest maximum).
	maxForks = 100
	// forkPrefix names the snapshot a fork takes (removed once the forks
	// are up); no team's prefix starts so.
	forkPrefix = "e2bfork-"
)

// snapshotNameRE is a snapshot name a team may give: with the team prefix
// (15 characters) it fits the local variant's 64.
var snapshotNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,48}$`)

// snapshotPrefix is the start of the on-disk names of a team's snapshots.
func snapshotPrefix(team string) string {
	sum := sha256.Sum256([]byte("code-sandboxes serve snapshot team\x00" + team))
	return "e2b-" + hex.EncodeToString(sum[:5]) + "-"
}

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// teamSnapshot is one of a team's snapshots.
type teamSnapshot struct {
	name, local, from string
	createdAt         time.Time
}

func (t teamSnapshot) info() snapshotInfo {
	return snapshotInfo{SnapshotID: t.name + snapshotTag, Names: []string{t.name + snapshotTag}}
}

// snapshotName is the name a snapshot id, template id or name filter
// means ("team/name:tag" forms are accepted; the team part is always the
// caller's), or "" if it can't name a snapshot.
func snapshotName(id string) string {
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		id = id[i+1:]
	}
	if i := strings.IndexByte(id, ':'); i >= 0 {
		id = id[:i]
	}
	if !snapshotNameRE.MatchString(id) {
		return ""
	}
	return id
}

// snapshots lists the team's snapshots, newest first.
func (s *Server) snapshots(ctx context.Context, team string) ([]teamSnapshot, error) {
	all, err := sandboxes.ListSnapshots(ctx, s.cfg)
	if errors.Is(err, sandboxes.ErrNotSupported) {
		return nil, nil // this server keeps none
	}
	if err != nil {
		return nil, err
	}
	p := snapshotPrefix(team)
	var out []teamSnapshot
	for _, a := range all {
		if n, ok := strings.CutPrefix(a.Name, p); ok && snapshotNameRE.MatchString(n) {
			out = append(out, teamSnapshot{name: n, local: a.Name, from: a.From, createdAt: a.CreatedAt})
		}
	}
	slices.SortFunc(out, func(a, b teamSnapshot) int {
		if c := b.createdAt.Compare(a.createdAt); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out, nil
}

// snapshotOf is the on-disk name of the team's snapshot id, or "".
func (s *Server) snapshotOf(ctx context.Context, team, id string) string {
	n := snapshotName(id)
	if n == "" {
		return ""
	}
	l, err := s.snapshots(ctx, team)
	if err != nil {
		return ""
	}
	for _, t := range l {
		if t.name == n {
			return t.local
		}
	}
	return ""
}

func (s *Server) maxSnapshots() int {
	if s.maxSnaps > 0 {
		return s.maxSnaps
	}
	return defaultMaxSnapshots
}

// createSnapshot is POST /sandboxes/{id}/snapshots: 201 and its
// SnapshotInfo. The sandbox is paused while its checkpoint is written and
// runs on after.
func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	e, _, ok := s.findPausable(w, r)
	if !ok {
		return
	}
	var req struct {
		Name *string `json:"name"`
	}
	if !decode(w, r, &req, true) {
		return
	}
	k := caller(r)
	name := "snapshot-" + ids.Token(6)
	if req.Name != nil && *req.Name != "" {
		if name = *req.Name; !snapshotNameRE.MatchString(name) {
			writeError(w, http.StatusBadRequest, "snapshot name %q: use 1 to 49 letters, digits, '-' or '_', starting with a letter or digit", *req.Name)
			return
		}
	}
	// One at a time: the cap is checked and the snapshot taken together.
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	l, err := s.snapshots(r.Context(), k.Team)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "listing snapshots: %v", err)
		return
	}
	for _, t := range l {
		if t.name == name {
			writeError(w, http.StatusConflict, "snapshot %q exists; delete it first (Sandbox.deleteSnapshot) or pick another name", name)
			return
		}
	}
	if len(l) >= s.maxSnapshots() {
		writeError(w, http.StatusTooManyRequests, "your team has %d snapshots, the most this server keeps per team (serve --max-snapshots); delete some (Sandbox.deleteSnapshot) first", len(l))
		return
	}
	// The request is not what ends a snapshot half-way: the pause goes on.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Minute)
	defer cancel()
	if err := e.sb.Snapshot(ctx, snapshotPrefix(k.Team)+name); err != nil {
		s.writePauseError(w, e, "snapshotting", err)
		return
	}
	if e.tunnel != nil {
		e.tunnel.CloseIdleConnections() // the pause closed them
	}
	s.log.Info("snapshot", "sandbox", e.id, "team", k.Team, "key", keyID(k.Key), "snapshot", name)
	writeJSON(w, http.StatusCreated, teamSnapshot{name: name}.info())
}

// listSnapshots is GET /snapshots: the team's snapshots, newest first,
// filtered by sandboxID and name, limit plus X-Next-Token paging.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := defaultListLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxListLimit {
			writeError(w, http.StatusBadRequest, "limit %q: give a number from 1 to %d", l, maxListLimit)
			return
		}
		limit = n
	}
	l, err := s.snapshots(r.Context(), caller(r).Team)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "listing snapshots: %v", err)
		return
	}
	if tok := q.Get("nextToken"); tok != "" {
		// The last one answered; those after it in the order follow.
		i := slices.IndexFunc(l, func(t teamSnapshot) bool { return snapshotCursor(t) == tok })
		if i < 0 {
			writeError(w, http.StatusBadRequest, "nextToken %q is invalid (or its snapshot was deleted): pass the X-Next-Token of a previous answer", tok)
			return
		}
		l = l[i+1:]
	}
	from, name := q.Get("sandboxID"), q.Get("name")
	out := []snapshotInfo{}
	var last teamSnapshot
	more := false
	for _, t := range l {
		if (from != "" && t.from != from) || (name != "" && snapshotName(name) != t.name) {
			continue
		}
		if len(out) == limit {
			more = true
			break
		}
		out, last = append(out, t.info()), t
	}
	if more {
		w.Header().Set("X-Next-Token", snapshotCursor(last))
	}
	writeJSON(w, http.StatusOK, out)
}

func snapshotCursor(t teamSnapshot) string {
	return strconv.FormatInt(t.createdAt.UnixNano(), 36) + "." + t.name
}

// deleteSnapshot is the snapshot half of DELETE /templates/{templateID}
// (the SDK's deleteSnapshot): it reports whether the id was one of the
// team's snapshots, and if so has answered.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) bool {
	k := caller(r)
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	local := s.snapshotOf(r.Context(), k.Team, r.PathValue("templateID"))
	if local == "" {
		return false
	}
	if err := sandboxes.DeleteSnapshot(r.Context(), s.cfg, local); err != nil {
		if errors.Is(err, sandboxes.ErrNotFound) {
			return false
		}
		writeError(w, http.StatusInternalServerError, "deleting snapshot %s: %v", r.PathValue("templateID"), err)
		return true
	}
	s.log.Info("snapshot deleted", "team", k.Team, "key", keyID(k.Key), "snapshot", r.PathValue("templateID"))
	w.WriteHeader(http.StatusNoContent)
	return true
}

// forkResult is E2B's SandboxForkResult.
type forkResult struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *apiError    `json:"error,omitempty"`
}

// fork is POST /sandboxes/{id}/fork: one snapshot of the sandbox (it runs
// on, same id and end), count sandboxes from it, each created as a create
// would (quota, rate, tags), and one result each; the snapshot is removed
// once they are up.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	e, _, ok := s.find(w, r)
	if !ok {
		return
	}
	var req struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if !decode(w, r, &req, true) {
		return
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > maxForks {
		writeError(w, http.StatusBadRequest, "count %d: give 1 to %d", count, maxForks)
		return
	}
	timeout := int64(15) // SandboxForkRequest's default
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if _, ok := s.timeout(w, timeout); !ok {
		return
	}
	k := caller(r)
	local := forkPrefix + ids.Token(12)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Minute)
	defer cancel()
	s.snapMu.Lock()
	err := e.sb.Snapshot(ctx, local)
	s.snapMu.Unlock()
	if err != nil {
		s.writePauseError(w, e, "snapshotting", err)
		return
	}
	defer func() { _ = sandboxes.DeleteSnapshot(context.Background(), s.cfg, local) }()
	if e.tunnel != nil {
		e.tunnel.CloseIdleConnections()
	}
	out := make([]forkResult, 0, count)
	for range count {
		rec := httptest.NewRecorder()
		s.createWith(rec, r, newSandbox{TemplateID: e.template, Timeout: &timeout}, local)
		var res forkResult
		if rec.Code == http.StatusCreated {
			var sj sandboxJSON
			if err := json.Unmarshal(rec.Body.Bytes(), &sj); err != nil {
				res.Error = &apiError{Code: http.StatusInternalServerError, Message: fmt.Sprintf("fork: %v", err)}
			} else {
				res.Sandbox = &sj
			}
		} else {
			var ae apiError
			if json.Unmarshal(rec.Body.Bytes(), &ae) != nil || ae.Message == "" {
				ae = apiError{Code: rec.Code, Message: strings.TrimSpace(rec.Body.String())}
			}
			res.Error = &ae
		}
		out = append(out, res)
	}
	s.log.Info("forked", "sandbox", e.id, "team", k.Team, "key", keyID(k.Key), "count", count)
	writeJSON(w, http.StatusCreated, out)
}
