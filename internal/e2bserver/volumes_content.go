// A volume's own content API under /volumecontent/{id}: stat, list, read,
// write, patch and remove, with the volume's token as the bearer token.

package e2bserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

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
