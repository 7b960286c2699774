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
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
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

// isVolumeContent: the content API, authenticated by the volume's token.
func isVolumeContent(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/volumecontent/")
}

// volumeContent serves /volumecontent/{id}/{dir,file,path}. The bearer
// token must be that volume's; a wrong token and an unknown id both get
// 404 (nothing tells a guesser which ids exist).
func (s *Server) volumeContent(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/volumecontent/")
	id, op, _ := strings.Cut(rest, "/")
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	v := s.volumes
	v.mu.Lock()
	err := v.load()
	rec := v.vols[id]
	v.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "volumes: %v", err)
		return
	}
	a, b := sha256.Sum256([]byte(tok)), sha256.Sum256([]byte(""))
	if rec != nil {
		b = sha256.Sum256([]byte(rec.Token))
	}
	if rec == nil || tok == "" || subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		s.metrics.refused.WithLabelValues("volume_token").Inc()
		writeError(w, http.StatusNotFound, "volume %q not found (or the token is not this volume's: send the token Volume.create or Volume.connect gave)", id)
		return
	}
	if err := mountVolume(filepath.Join(v.dir, rec.ID, "image"), v.mnt(rec.ID)); err != nil {
		writeError(w, http.StatusInternalServerError, "volume %s: %v", rec.ID, err)
		return
	}
	root, err := os.OpenRoot(v.mnt(rec.ID))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "volume %s: %v", rec.ID, err)
		return
	}
	defer root.Close()
	q := r.URL.Query()
	rel, ok := volumePath(q.Get("path"))
	if !ok {
		writeError(w, http.StatusBadRequest, "path %q: give a path inside the volume, e.g. /dir/file.txt (no '..')", q.Get("path"))
		return
	}
	vc := volumeCall{w: w, r: r, root: root, rel: rel, q: q}
	switch {
	case op == "dir" && r.Method == http.MethodGet:
		vc.list()
	case op == "dir" && r.Method == http.MethodPost:
		vc.makeDir()
	case op == "file" && r.Method == http.MethodGet:
		vc.read()
	case op == "file" && r.Method == http.MethodPut:
		vc.write(rec.Size)
	case op == "path" && r.Method == http.MethodGet:
		vc.stat(http.StatusOK)
	case op == "path" && r.Method == http.MethodPatch:
		vc.patch()
	case op == "path" && r.Method == http.MethodDelete:
		vc.remove()
	default:
		writeError(w, http.StatusNotFound, "no route for %s %s on this server's volume API", r.Method, r.URL.Path)
	}
}

// volumePath turns the API's path (absolute or not, inside the volume)
// into one os.Root takes: clean, relative, "." for the root.
func volumePath(p string) (string, bool) {
	if len(p) > 4096 || strings.ContainsRune(p, 0) {
		return "", false
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", false
		}
	}
	c := path.Clean("/" + p)
	if c == "/" {
		return ".", true
	}
	return c[1:], true
}

type volumeCall struct {
	w    http.ResponseWriter
	r    *http.Request
	root *os.Root
	rel  string
	q    map[string][]string
}

func (c volumeCall) get(k string) string {
	if v := c.q[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// fail maps a file system error to E2B's answers.
func (c volumeCall) fail(what string, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeError(c.w, http.StatusNotFound, "path %q not found", "/"+strings.TrimPrefix(c.rel, "."))
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG):
		writeError(c.w, http.StatusRequestEntityTooLarge, "%s: the volume is full (its size is fixed by the server, serve --volume-size); remove files first", what)
	case errors.Is(err, fs.ErrExist):
		writeError(c.w, http.StatusConflict, "%s: %q exists", what, "/"+c.rel)
	case errors.Is(err, syscall.ENXIO):
		writeError(c.w, http.StatusBadRequest, "%s: %q is not a regular file", what, "/"+c.rel)
	case errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY):
		writeError(c.w, http.StatusBadRequest, "%s: %v", what, errors.Unwrap(err))
	default:
		var pe *fs.PathError
		if errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes") {
			writeError(c.w, http.StatusBadRequest, "%s: the path leads out of the volume (a symlink); give a path inside it", what)
			return
		}
		writeError(c.w, http.StatusInternalServerError, "%s: %v", what, err)
	}
}

// entryStat is E2B's VolumeEntryStat.
type entryStat struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Mode   uint32 `json:"mode"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	ATime  string `json:"atime"`
	MTime  string `json:"mtime"`
	CTime  string `json:"ctime"`
	Target string `json:"target,omitempty"`
}

func (c volumeCall) statOf(rel string) (entryStat, error) {
	fi, err := c.root.Lstat(rel)
	if err != nil {
		return entryStat{}, err
	}
	e := entryStat{Name: fi.Name(), Path: "/" + strings.TrimPrefix(rel, "."), Size: fi.Size(), Mode: uint32(fi.Mode().Perm())}
	if rel == "." {
		e.Name, e.Path = "", "/"
	}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type = "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
		if t, err := c.root.Readlink(rel); err == nil {
			e.Target = t
		}
	default:
		e.Type = "unknown"
	}
	e.MTime = fi.ModTime().UTC().Format(time.RFC3339Nano)
	e.ATime, e.CTime = e.MTime, e.MTime
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
		e.ATime, e.CTime = statTimes(st)
	}
	return e, nil
}

func (c volumeCall) stat(status int) {
	e, err := c.statOf(c.rel)
	if err != nil {
		c.fail("stat", err)
		return
	}
	writeJSON(c.w, status, e)
}

func (c volumeCall) list() {
	depth := 1
	if d := c.get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > maxListDepth {
			writeError(c.w, http.StatusBadRequest, "depth %q: give 1 to %d", d, maxListDepth)
			return
		}
		depth = n
	}
	fi, err := c.root.Lstat(c.rel)
	if err != nil {
		c.fail("list", err)
		return
	}
	if !fi.IsDir() {
		writeError(c.w, http.StatusBadRequest, "list: %q is not a directory", "/"+strings.TrimPrefix(c.rel, "."))
		return
	}
	out := []entryStat{}
	var walk func(rel string, d int) error
	walk = func(rel string, d int) error {
		// Never blocking (a FIFO swapped in would hold the open), and a
		// directory only.
		f, err := c.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		names, err := f.Readdirnames(maxListEntries + 1)
		f.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		sort.Strings(names)
		for _, n := range names {
			if len(out) >= maxListEntries {
				return errTooMany
			}
			child := path.Join(rel, n)
			e, err := c.statOf(child)
			if err != nil {
				continue // gone meanwhile
			}
			out = append(out, e)
			if e.Type == "directory" && d > 1 {
				if err := walk(child, d-1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(c.rel, depth); err != nil {
		if errors.Is(err, errTooMany) {
			writeError(c.w, http.StatusRequestEntityTooLarge, "the listing has more than %d entries; list a smaller directory or a lower depth", maxListEntries)
			return
		}
		c.fail("list", err)
		return
	}
	writeJSON(c.w, http.StatusOK, out)
}

var errTooMany = errors.New("too many entries")

// ownership reads uid, gid and mode from the query (-1 = not given).
func (c volumeCall) ownership() (uid, gid int, mode os.FileMode, ok bool) {
	uid, gid, mode = -1, -1, 0
	num := func(k string, max int64) (int64, bool) {
		s := c.get(k)
		if s == "" {
			return -1, true
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || n > max {
			writeError(c.w, http.StatusBadRequest, "%s %q: give a number from 0 to %d", k, s, max)
			return 0, false
		}
		return n, true
	}
	u, ok1 := num("uid", 1<<31-1)
	if !ok1 {
		return
	}
	g, ok2 := num("gid", 1<<31-1)
	if !ok2 {
		return
	}
	m, ok3 := num("mode", 0o777)
	if !ok3 {
		return
	}
	if m >= 0 {
		mode = os.FileMode(m)
	}
	return int(u), int(g), mode, true
}

func (c volumeCall) applyOwnership(rel string, uid, gid int, mode os.FileMode) error {
	if mode != 0 {
		if err := c.root.Chmod(rel, mode); err != nil {
			return err
		}
	}
	if uid >= 0 || gid >= 0 {
		return c.root.Lchown(rel, uid, gid)
	}
	return nil
}

func (c volumeCall) makeDir() {
	uid, gid, mode, ok := c.ownership()
	if !ok {
		return
	}
	if c.rel == "." {
		writeError(c.w, http.StatusConflict, "the volume's root exists; give a path below it")
		return
	}
	var err error
	if c.get("force") == "true" {
		err = c.root.MkdirAll(c.rel, 0o777)
	} else {
		err = c.root.Mkdir(c.rel, 0o777)
	}
	if err == nil {
		err = c.applyOwnership(c.rel, uid, gid, mode)
	}
	if err != nil {
		c.fail("make directory", err)
		return
	}
	c.stat(http.StatusCreated)
}

func (c volumeCall) read() {
	// O_NONBLOCK: what a sandbox planted (a FIFO) must not hold the
	// open; only a regular file is read.
	f, err := c.root.OpenFile(c.rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		c.fail("read", err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		c.fail("read", err)
		return
	}
	if !fi.Mode().IsRegular() {
		writeError(c.w, http.StatusBadRequest, "read: %q is not a file", "/"+c.rel)
		return
	}
	c.w.Header().Set("Content-Type", "application/octet-stream")
	c.w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	c.w.WriteHeader(http.StatusOK)
	// The file is at most the volume's size; the copy ends with it.
	_, _ = io.Copy(c.w, io.LimitReader(f, fi.Size()))
}

func (c volumeCall) write(limit int64) {
	uid, gid, mode, ok := c.ownership()
	if !ok {
		return
	}
	if c.rel == "." {
		writeError(c.w, http.StatusBadRequest, "write: give a file path, not the volume's root")
		return
	}
	if dir := path.Dir(c.rel); dir != "." {
		// As E2B: parents are made.
		if err := c.root.MkdirAll(dir, 0o777); err != nil {
			c.fail("write", err)
			return
		}
	}
	if mode == 0 {
		mode = 0o666
	}
	// O_NONBLOCK and no O_TRUNC until it is known to be a regular file:
	// a FIFO or a device planted there is refused, never opened for good.
	f, err := c.root.OpenFile(c.rel, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK, mode)
	if err != nil {
		c.fail("write", err)
		return
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		writeError(c.w, http.StatusBadRequest, "write: %q is not a regular file; remove it first", "/"+c.rel)
		return
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		c.fail("write", err)
		return
	}
	// Never more than the volume holds: a body beyond fails with 413 here
	// as ENOSPC would, without reading the rest.
	n, err := io.Copy(f, io.LimitReader(c.r.Body, limit+1))
	if err == nil && n > limit {
		err = syscall.ENOSPC
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = c.root.Remove(c.rel) // a half-written file would keep the space
		c.fail("write", err)
		return
	}
	if err := c.applyOwnership(c.rel, uid, gid, 0); err != nil {
		c.fail("write", err)
		return
	}
	c.stat(http.StatusCreated)
}

func (c volumeCall) patch() {
	var body struct {
		UID  *int64 `json:"uid"`
		GID  *int64 `json:"gid"`
		Mode *int64 `json:"mode"`
	}
	c.r.Body = http.MaxBytesReader(c.w, c.r.Body, 4096)
	if !decode(c.w, c.r, &body, false) {
		return
	}
	uid, gid := -1, -1
	for _, p := range []struct {
		v   *int64
		dst *int
		max int64
		k   string
	}{{body.UID, &uid, 1<<31 - 1, "uid"}, {body.GID, &gid, 1<<31 - 1, "gid"}} {
		if p.v != nil {
			if *p.v < 0 || *p.v > p.max {
				writeError(c.w, http.StatusBadRequest, "%s %d: give 0 to %d", p.k, *p.v, p.max)
				return
			}
			*p.dst = int(*p.v)
		}
	}
	var mode os.FileMode
	if body.Mode != nil {
		if *body.Mode < 0 || *body.Mode > 0o777 {
			writeError(c.w, http.StatusBadRequest, "mode %o: give permission bits, 0 to 0777", *body.Mode)
			return
		}
		mode = os.FileMode(*body.Mode)
	}
	if _, err := c.root.Lstat(c.rel); err != nil {
		c.fail("update", err)
		return
	}
	if err := c.applyOwnership(c.rel, uid, gid, mode); err != nil {
		c.fail("update", err)
		return
	}
	c.stat(http.StatusOK)
}

func (c volumeCall) remove() {
	if c.rel == "." {
		writeError(c.w, http.StatusBadRequest, "remove: the volume's root can't be removed; destroy the volume instead (Volume.destroy)")
		return
	}
	if _, err := c.root.Lstat(c.rel); err != nil {
		c.fail("remove", err)
		return
	}
	if err := c.root.RemoveAll(c.rel); err != nil {
		c.fail("remove", err)
		return
	}
	c.w.WriteHeader(http.StatusNoContent)
}

// jsonStrict decodes b into v, refusing fields v doesn't have.
func jsonStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}
