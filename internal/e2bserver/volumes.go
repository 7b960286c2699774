package e2bserver

// E2B's Volume API: POST/GET /volumes, GET/DELETE /volumes/{id} (the
// team's API key), the volume's own content API under /volumecontent/{id}
// (the volume's token as a bearer token, as the SDKs send it), and
// volumeMounts at create. A volume belongs to the team whose key created
// it: other teams get 404 for it everywhere, the same answer as for an id
// that never existed. Its files live in a file system of its own with a
// fixed size (volumes_linux.go: a loop-mounted ext4 image), so a full
// volume fails writes with ENOSPC (413 through the API) and never fills
// the host's disk.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/ids"
	"github.com/code-sandboxes/code-sandboxes/internal/records"
)

// Defaults of Options.VolumeSize and Options.MaxVolumes.
const (
	DefaultVolumeSize = 1 << 30
	DefaultMaxVolumes = 20
	minVolumeSize     = 16 << 20 // ext4 with a journal needs a few MiB
)

// tagVolumePrefix + a volume's id tags each sandbox that mounts it (its
// value is the mount path): a destroy looks for them, after a restart too.
const tagVolumePrefix = tagPrefix + "vol-"

// volumeNamePattern: E2B's names are short identifiers; this keeps them
// usable in messages and CLI arguments.
var volumeNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// volumeIDPattern is the shape of our volume ids (checked before any
// path is built from one).
var volumeIDPattern = regexp.MustCompile(`^vol[0-9a-z]{8,40}$`)

// Bounds of the content API.
const (
	maxListEntries = 10000
	maxListDepth   = 16
)

// volumeRecord is a volume's record on disk (record.json in its
// directory, written atomically, mode 0600: it holds the token).
type volumeRecord struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Team      string    `json:"team"`
	Token     string    `json:"token"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"created_at"`
}

// volumeStore holds the volumes under dir, one directory per volume:
// record.json, image (the file system) and mnt (where it is mounted).
type volumeStore struct {
	dir     string
	size    int64
	max     int
	mu      sync.Mutex
	vols    map[string]*volumeRecord // by id
	loaded  bool
	pending map[string]int // creates in flight that mount the volume
}

func newVolumeStore(dir string, size int64, max int) (*volumeStore, error) {
	if size == 0 {
		size = DefaultVolumeSize
	}
	if max == 0 {
		max = DefaultMaxVolumes
	}
	if size < minVolumeSize {
		return nil, fmt.Errorf("the volume size %d is below %d bytes (16 MiB)", size, minVolumeSize)
	}
	if max < 0 {
		return nil, fmt.Errorf("the volume count bound must not be negative (%d)", max)
	}
	return &volumeStore{dir: dir, size: size, max: max, vols: map[string]*volumeRecord{}, pending: map[string]int{}}, nil
}

// load reads the records once (on first use, so that a server that never
// sees a volume call touches nothing). Called with mu held.
func (v *volumeStore) load() error {
	if v.loaded {
		return nil
	}
	if err := os.MkdirAll(v.dir, 0o700); err != nil {
		return fmt.Errorf("volume directory %s: %w", v.dir, err)
	}
	ents, err := os.ReadDir(v.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() || !volumeIDPattern.MatchString(e.Name()) {
			continue
		}
		var r volumeRecord
		if err := records.Read(filepath.Join(v.dir, e.Name(), "record.json"), &r); err != nil || r.ID != e.Name() {
			continue // a create that didn't finish: no record, no volume
		}
		v.vols[r.ID] = &r
	}
	v.loaded = true
	return nil
}

// get returns team's volume id, or nil (another team's is nil too).
func (v *volumeStore) get(team, id string) (*volumeRecord, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.load(); err != nil {
		return nil, err
	}
	r := v.vols[id]
	if r == nil || r.Team != team {
		return nil, nil
	}
	return r, nil
}

// byName returns team's volume called name, or nil.
func (v *volumeStore) byName(team, name string) (*volumeRecord, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.load(); err != nil {
		return nil, err
	}
	for _, r := range v.vols {
		if r.Team == team && r.Name == name {
			return r, nil
		}
	}
	return nil, nil
}

func (v *volumeStore) mnt(id string) string { return filepath.Join(v.dir, id, "mnt") }

// volumeJSON is E2B's Volume; volumeAndToken is VolumeAndToken.
type volumeJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
}

type volumeAndToken struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token"`
}

func (s *Server) volumeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /volumes", s.createVolume)
	mux.HandleFunc("GET /volumes", s.listVolumes)
	mux.HandleFunc("GET /volumes/{id}", s.getVolume)
	mux.HandleFunc("DELETE /volumes/{id}", s.destroyVolume)
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if !decode(w, r, &req, false) {
		return
	}
	if !volumeNamePattern.MatchString(req.Name) {
		writeError(w, http.StatusBadRequest, "volume name %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", req.Name)
		return
	}
	if err := volumeSupport(); err != nil {
		writeError(w, http.StatusNotImplemented, "volumes: %v", err)
		return
	}
	k := caller(r)
	v := s.volumes
	v.mu.Lock()
	if err := v.load(); err != nil {
		v.mu.Unlock()
		writeError(w, http.StatusInternalServerError, "volumes: %v", err)
		return
	}
	n := 0
	for _, o := range v.vols {
		if o.Team != k.Team {
			continue
		}
		if o.Name == req.Name {
			v.mu.Unlock()
			writeError(w, http.StatusConflict, "your team already has a volume named %q (%s); pick another name or destroy it first", req.Name, o.ID)
			return
		}
		n++
	}
	if n >= v.max {
		v.mu.Unlock()
		writeError(w, http.StatusTooManyRequests, "your team has %d volumes, the most this server keeps per team (serve --max-volumes); destroy one first", n)
		return
	}
	rec := &volumeRecord{ID: "vol" + strings.ToLower(ids.Token(10)), Name: req.Name, Team: k.Team, Token: "vt_" + ids.Token(24), Size: v.size, CreatedAt: time.Now().UTC()}
	// The name is reserved now (the file system takes a moment to make);
	// the record is written only once the volume is usable.
	v.vols[rec.ID] = rec
	v.mu.Unlock()
	dir := filepath.Join(v.dir, rec.ID)
	err := func() error {
		if !volumeIDPattern.MatchString(rec.ID) {
			return fmt.Errorf("generated id %q has an unexpected shape", rec.ID)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		if err := makeVolumeFS(r.Context(), filepath.Join(dir, "image"), v.mnt(rec.ID), rec.Size); err != nil {
			return err
		}
		return records.Write(filepath.Join(dir, "record.json"), rec)
	}()
	if err != nil {
		_ = unmountVolume(v.mnt(rec.ID))
		_ = os.RemoveAll(dir)
		v.mu.Lock()
		delete(v.vols, rec.ID)
		v.mu.Unlock()
		s.log.Error("volume create failed", "team", k.Team, "error", err)
		writeError(w, http.StatusInternalServerError, "creating the volume: %v", err)
		return
	}
	s.log.Info("volume created", "volume", rec.ID, "team", k.Team, "size", rec.Size)
	writeJSON(w, http.StatusCreated, volumeAndToken{VolumeID: rec.ID, Name: rec.Name, Token: rec.Token})
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	k := caller(r)
	v := s.volumes
	v.mu.Lock()
	if err := v.load(); err != nil {
		v.mu.Unlock()
		writeError(w, http.StatusInternalServerError, "volumes: %v", err)
		return
	}
	out := []volumeJSON{}
	for _, r := range v.vols {
		if r.Team == k.Team {
			out = append(out, volumeJSON{VolumeID: r.ID, Name: r.Name})
		}
	}
	v.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, http.StatusOK, out)
}

// volumeOf answers 404 unless the caller's team has the volume of the
// path's id.
func (s *Server) volumeOf(w http.ResponseWriter, r *http.Request) *volumeRecord {
	id := r.PathValue("id")
	rec, err := s.volumes.get(caller(r).Team, id)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "volumes: %v", err)
		return nil
	}
	if rec == nil {
		writeError(w, http.StatusNotFound, "volume %q not found", id)
		return nil
	}
	return rec
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	if rec := s.volumeOf(w, r); rec != nil {
		writeJSON(w, http.StatusOK, volumeAndToken{VolumeID: rec.ID, Name: rec.Name, Token: rec.Token})
	}
}

func (s *Server) destroyVolume(w http.ResponseWriter, r *http.Request) {
	rec := s.volumeOf(w, r)
	if rec == nil {
		return
	}
	k := caller(r)
	// Sandboxes that mount it (its tag), after a restart too; and creates
	// in flight that will.
	infos, err := s.ours(r.Context(), k.Team)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "listing the sandboxes that may mount the volume: %v", err)
		return
	}
	var users []string
	for _, i := range infos {
		if _, ok := i.Tags[tagVolumePrefix+rec.ID]; ok {
			users = append(users, i.ID)
		}
	}
	v := s.volumes
	v.mu.Lock()
	if v.pending[rec.ID] > 0 {
		users = append(users, "(a sandbox being created)")
	}
	if len(users) > 0 {
		v.mu.Unlock()
		writeError(w, http.StatusConflict, "volume %s is mounted by sandboxes %s; kill them first, then destroy the volume", rec.ID, strings.Join(users, ", "))
		return
	}
	delete(v.vols, rec.ID)
	v.mu.Unlock()
	dir := filepath.Join(v.dir, rec.ID)
	// The record goes first: a crash half-way leaves no volume, only files
	// that the next destroy of the same id can't reach (logged).
	if err := os.Remove(filepath.Join(dir, "record.json")); err != nil {
		s.log.Error("volume destroy", "volume", rec.ID, "error", err)
	}
	if err := unmountVolume(v.mnt(rec.ID)); err != nil {
		s.log.Error("volume destroy: unmount", "volume", rec.ID, "error", err)
	} else if err := os.RemoveAll(dir); err != nil {
		s.log.Error("volume destroy: remove", "volume", rec.ID, "error", err)
	}
	s.log.Info("volume destroyed", "volume", rec.ID, "team", k.Team)
	w.WriteHeader(http.StatusNoContent)
}
