// volumeMounts at create: resolving a create request's volumes (and its
// tags' volumes) to the mounts the sandbox gets.

package e2bserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// volumeMount is E2B's SandboxVolumeMount.
type volumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// volumeMountsOf resolves a create's volumeMounts for team: the mounts
// for sandboxes.Config, the tags that mark the sandbox as using them, and
// release (call it once the sandbox is committed or failed). An error is
// the client's (400), with what to do.
func (s *Server) volumeMountsOf(team string, raw []json.RawMessage) ([]sandboxes.VolumeMount, map[string]string, func(), error) {
	none := func() {}
	if len(raw) == 0 {
		return nil, nil, none, nil
	}
	if err := volumeSupport(); err != nil {
		return nil, nil, none, fmt.Errorf("volume mounts: %w", err)
	}
	if s.cfg.Variant != "local" && s.cfg.Variant != "docker" {
		// serve's volumes are file systems on this host: a pod elsewhere
		// can't mount them (the kubernetes variant mounts claims through
		// the Go API, not yet through serve).
		return nil, nil, none, fmt.Errorf("volume mounts: serve's volumes live on this host and its %s sandboxes can't mount them; use serve with --variant local or docker", s.cfg.Variant)
	}
	var mounts []sandboxes.VolumeMount
	tags := map[string]string{}
	var vids []string
	for _, b := range raw {
		var m volumeMount
		if err := jsonStrict(b, &m); err != nil {
			return nil, nil, none, fmt.Errorf("volumeMounts: each is {\"name\": volume name, \"path\": absolute path}: %v", err)
		}
		if err := sandboxes.CheckVolumePath(m.Path); err != nil {
			return nil, nil, none, err
		}
		rec, err := s.volumes.byName(team, m.Name)
		if err != nil {
			return nil, nil, none, err
		}
		if rec == nil {
			return nil, nil, none, fmt.Errorf("volume %q not found; create it first (Volume.create)", m.Name)
		}
		if slices.Contains(vids, rec.ID) {
			return nil, nil, none, fmt.Errorf("volume %q is mounted twice; mount it once", m.Name)
		}
		if err := mountVolume(filepath.Join(s.volumes.dir, rec.ID, "image"), s.volumes.mnt(rec.ID)); err != nil {
			return nil, nil, none, fmt.Errorf("volume %q: %w", m.Name, err)
		}
		vids = append(vids, rec.ID)
		mounts = append(mounts, sandboxes.VolumeMount{Source: s.volumes.mnt(rec.ID), Path: path.Clean(m.Path)})
		tags[tagVolumePrefix+rec.ID] = path.Clean(m.Path)
	}
	v := s.volumes
	v.mu.Lock()
	for _, id := range vids {
		if v.vols[id] == nil {
			v.mu.Unlock()
			return nil, nil, none, errors.New("a volume was destroyed while the sandbox was created; create it again")
		}
	}
	for _, id := range vids {
		v.pending[id]++
	}
	v.mu.Unlock()
	var once sync.Once
	return mounts, tags, func() {
		once.Do(func() {
			v.mu.Lock()
			for _, id := range vids {
				if v.pending[id]--; v.pending[id] <= 0 {
					delete(v.pending, id)
				}
			}
			v.mu.Unlock()
		})
	}, nil
}

// mountsOfTags gives a sandbox's volumeMounts (SandboxDetail) from its
// tags: the volume's name now and the path it was mounted at.
func (s *Server) mountsOfTags(team string, tags map[string]string) []any {
	out := []any{}
	for k, p := range tags {
		id, ok := strings.CutPrefix(k, tagVolumePrefix)
		if !ok {
			continue
		}
		if rec, _ := s.volumes.get(team, id); rec != nil {
			out = append(out, volumeMount{Name: rec.Name, Path: p})
		}
	}
	return out
}

// jsonStrict decodes b into v, refusing fields v doesn't have.
func jsonStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}
