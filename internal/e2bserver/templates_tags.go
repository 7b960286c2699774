// A template's tags: assigning, deleting and listing them.

package e2bserver

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// tagsWith is how many distinct tags tp would have with more added: its
// tags, those its builds in progress will assign, and more (t.mu held).
func (tp *template) tagsWith(more []string) int {
	all := map[string]bool{}
	for tg := range tp.Tags {
		all[tg] = true
	}
	for _, b := range tp.Builds {
		if b.Status == "waiting" || b.Status == "building" {
			for _, tg := range b.Tags {
				all[tg] = true
			}
		}
	}
	for _, tg := range more {
		all[tg] = true
	}
	return len(all)
}

func (s *Server) assignTags(w http.ResponseWriter, r *http.Request) {
	k := caller(r)
	var req struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if !decode(w, r, &req, false) {
		return
	}
	name, tag, _ := strings.Cut(req.Target, ":")
	if tag == "" {
		tag = "default"
	}
	if len(req.Tags) == 0 || len(req.Tags) > 16 {
		writeError(w, http.StatusBadRequest, "give 1 to 16 tags")
		return
	}
	for _, tg := range req.Tags {
		if !tagRE.MatchString(tg) {
			writeError(w, http.StatusBadRequest, "tag %q: use letters, digits, '.', '-' and '_' (at most 63)", tg)
			return
		}
	}
	t := s.templates
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.find(k.Team, name)
	if tp == nil || tp.Tags[tag] == nil {
		writeError(w, http.StatusNotFound, "template %q has no build tagged %q", name, tag)
		return
	}
	if n := tp.tagsWith(req.Tags); n > maxTagsPerTemplate {
		writeError(w, http.StatusBadRequest, "template %s would have %d tags, at most %d: delete some (DELETE /templates/tags) first", name, n, maxTagsPerTemplate)
		return
	}
	id := tp.Tags[tag].BuildID
	now := time.Now().UTC()
	for _, tg := range req.Tags {
		tp.Tags[tg] = &tplTag{BuildID: id, CreatedAt: now}
	}
	if err := t.save(k.Team); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"tags": req.Tags, "buildID": id})
}

func (s *Server) deleteTags(w http.ResponseWriter, r *http.Request) {
	k := caller(r)
	var req struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if !decode(w, r, &req, false) {
		return
	}
	t := s.templates
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.find(k.Team, req.Name)
	if tp == nil {
		writeError(w, http.StatusNotFound, "template %q not found", req.Name)
		return
	}
	for _, tg := range req.Tags {
		if tp.Tags[tg] == nil {
			writeError(w, http.StatusNotFound, "template %q has no tag %q", req.Name, tg)
			return
		}
	}
	for _, tg := range req.Tags {
		delete(tp.Tags, tg)
	}
	if err := t.save(k.Team); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) templateTags(w http.ResponseWriter, r *http.Request) {
	tp, _, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	s.templates.mu.Lock()
	out := []map[string]any{}
	for tg, v := range tp.Tags {
		out = append(out, map[string]any{"tag": tg, "buildID": v.BuildID, "createdAt": v.CreatedAt})
	}
	s.templates.mu.Unlock()
	slices.SortFunc(out, func(a, b map[string]any) int { return strings.Compare(a["tag"].(string), b["tag"].(string)) })
	writeJSON(w, http.StatusOK, out)
}
