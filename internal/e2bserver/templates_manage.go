// Listing, reading, aliasing and deleting templates, and what a deleted
// template's builds give back.

package e2bserver

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/code-sandboxes/code-sandboxes/internal/environment"
)

// templateJSON is E2B's Template (t.mu held).
func templateJSON(tp *template) map[string]any {
	var last *tplBuild
	for _, b := range tp.Builds {
		if b.Status == "ready" {
			last = b
		}
	}
	status, buildID, cpu, mem := "waiting", "", 2, 1024
	if len(tp.Builds) > 0 {
		status = tp.Builds[len(tp.Builds)-1].Status
	}
	if last != nil {
		buildID, cpu, mem = last.ID, max(last.CPUCount, 1), max(last.MemoryMB, 128)
	}
	return map[string]any{"templateID": tp.ID, "buildID": buildID, "cpuCount": cpu, "memoryMB": mem, "diskSizeMB": 0,
		"public": false, "aliases": []string{tp.Name}, "names": []string{tp.Name}, "createdAt": tp.CreatedAt, "updatedAt": tp.UpdatedAt,
		"createdBy": nil, "lastSpawnedAt": tp.SpawnedAt, "spawnCount": tp.Spawns, "buildCount": len(tp.Builds),
		"envdVersion": EnvdVersion, "buildStatus": status}
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	k := caller(r)
	s.templates.mu.Lock()
	out := []map[string]any{}
	for _, tp := range s.templates.load(k.Team) {
		out = append(out, templateJSON(tp))
	}
	s.templates.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	tp, _, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	s.templates.mu.Lock()
	defer s.templates.mu.Unlock()
	builds := []map[string]any{}
	for i := len(tp.Builds) - 1; i >= 0; i-- {
		b := tp.Builds[i]
		bj := map[string]any{"buildID": b.ID, "status": b.Status, "createdAt": b.CreatedAt, "updatedAt": b.UpdatedAt,
			"cpuCount": max(b.CPUCount, 1), "memoryMB": max(b.MemoryMB, 128), "envdVersion": EnvdVersion}
		if b.FinishedAt != nil {
			bj["finishedAt"] = b.FinishedAt
		}
		builds = append(builds, bj)
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": tp.ID, "public": false, "aliases": []string{tp.Name}, "names": []string{tp.Name},
		"createdAt": tp.CreatedAt, "updatedAt": tp.UpdatedAt, "lastSpawnedAt": tp.SpawnedAt, "spawnCount": tp.Spawns, "builds": builds})
}

// deleteTemplate forgets the template and removes its environment builds
// that nothing else holds (releaseBuilds): a build a live sandbox of the
// template runs on, or that another template (of any team: builds are
// content-addressed) or a store name points at, stays, and the log says
// which and why.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if s.deleteSnapshot(w, r) { // the SDK's deleteSnapshot (snapshots.go)
		return
	}
	tp, team, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	// Taken before the templates' lock, never while holding it.
	s.mu.Lock()
	live := 0
	for _, e := range s.sandboxes {
		if e.team == team && (e.template == tp.ID || e.template == tp.Name || strings.HasPrefix(e.template, tp.Name+":")) {
			live++
		}
	}
	s.mu.Unlock()
	t := s.templates
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range tp.Builds {
		if b.Status == "waiting" || b.Status == "building" {
			writeError(w, http.StatusConflict, "template %s has a build in progress; delete it when the build ends", tp.ID)
			return
		}
	}
	t.teams[team] = slices.DeleteFunc(t.load(team), func(x *template) bool { return x == tp })
	if err := t.save(team); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	removed, kept := t.releaseBuilds(team, tp, live > 0)
	files := t.releaseUploads(team, tp)
	s.log.Info("template deleted", "team", team, "template", tp.ID, "name", tp.Name,
		"builds_removed", removed, "builds_kept", kept, "files_removed", files)
	w.WriteHeader(http.StatusNoContent)
}

// releaseBuilds removes the environment builds of a deleted template
// (already out of its team's list; t.mu held) unless inUse (a live sandbox
// of the template), another template of any team, or a store name other
// than the template's own holds them. It returns what it removed and what
// it kept, with the reason.
func (t *templateStore) releaseBuilds(team string, tp *template, inUse bool) (removed, kept []string) {
	ids := map[string]bool{}
	for _, b := range tp.Builds {
		if b.EnvID != "" {
			ids[b.EnvID] = true
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if inUse {
		for id := range ids {
			kept = append(kept, id[:12]+": a live sandbox of the template may run on it")
		}
		return nil, kept
	}
	held := t.heldEnvIDs()
	names := t.store.Names()
	for id := range ids {
		why := ""
		if held[id] {
			why = "another template's build"
		}
		for n, nid := range names {
			if nid == id && n != envName(team, tp.Name) {
				why = "the environment name " + n + " points at it"
			}
		}
		if why != "" {
			kept = append(kept, id[:12]+": "+why)
			continue
		}
		if _, err := t.store.Remove(id); err != nil && !errors.Is(err, environment.ErrNotFound) {
			kept = append(kept, id[:12]+": "+err.Error())
			continue
		}
		removed = append(removed, id[:12])
	}
	slices.Sort(removed)
	slices.Sort(kept)
	return removed, kept
}

// heldEnvIDs is every environment build any team's template refers to
// (t.mu held): the loaded teams from memory, the others from disk.
func (t *templateStore) heldEnvIDs() map[string]bool {
	held := map[string]bool{}
	loaded := map[string]bool{}
	add := func(l []*template) {
		for _, tp := range l {
			for _, b := range tp.Builds {
				if b.EnvID != "" {
					held[b.EnvID] = true
				}
			}
		}
	}
	for team, l := range t.teams {
		loaded[filepath.Base(t.teamDir(team))] = true
		add(l)
	}
	ents, _ := os.ReadDir(t.dir)
	for _, e := range ents {
		if !e.IsDir() || loaded[e.Name()] {
			continue
		}
		var l []*template
		if raw, err := os.ReadFile(filepath.Join(t.dir, e.Name(), "templates.json")); err == nil && json.Unmarshal(raw, &l) == nil {
			add(l)
		}
	}
	return held
}

// templateAlias answers Template.exists. Another team's template of the
// same name does not exist for the caller: names are per team here.
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request) {
	k := caller(r)
	if name := r.PathValue("sub"); slices.Contains(templates, name) {
		// The server's own templates exist for every team (Template.exists
		// ("base")), as E2B's public ones do.
		writeJSON(w, http.StatusOK, map[string]any{"templateID": name, "public": true})
		return
	}
	s.templates.mu.Lock()
	tp := s.templates.find(k.Team, r.PathValue("sub"))
	s.templates.mu.Unlock()
	if tp == nil {
		writeError(w, http.StatusNotFound, "template %q not found", r.PathValue("sub"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": tp.ID, "public": false})
}
