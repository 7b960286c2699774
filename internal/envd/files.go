package envd

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// copyBufSize is the upload copy buffer: big enough for few syscalls, small
// enough that many concurrent uploads stay cheap.
const copyBufSize = 256 * 1024

// filesHandler serves GET/POST /files (envd's content API). Everything is
// streamed: memory use does not depend on file size.
type filesHandler struct {
	opts Options
}

// NewFilesHandler returns the handler for /files.
func NewFilesHandler(opts Options) http.Handler {
	return &filesHandler{opts: opts}
}

// httpError is an error with the HTTP status it answers with.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// writeJSONError answers with envd's error body {"code":<int>,"message":"…"}.
func writeJSONError(w http.ResponseWriter, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	w.Header().Del("Content-Encoding")
	w.Header().Del("Content-Disposition")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(he.status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{he.status, he.msg})
}

// osHTTPError maps a filesystem error on path to a status and message.
// The message names what was asked (what carries the path) and the
// reason once: not the OS error's own "open PATH: reason" again, whose
// path may be an internal one.
func osHTTPError(what string, err error) *httpError {
	reason := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		reason = pe.Err.Error()
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errorf(http.StatusNotFound, "%s: no such file or directory", what)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errorf(http.StatusInsufficientStorage, "%s: not enough disk space (%s)", what, reason)
	case errors.Is(err, syscall.EROFS):
		return errorf(http.StatusForbidden, "%s: read-only file system (write under /home/user, /tmp or /files)", what)
	case errors.Is(err, fs.ErrPermission):
		return errorf(http.StatusForbidden, "%s: permission denied", what)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EINVAL):
		return errorf(http.StatusBadRequest, "%s: %s", what, reason)
	default:
		return errorf(http.StatusInternalServerError, "%s: %s", what, reason)
	}
}

func (h *filesHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var err error
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		err = h.download(w, r)
	case http.MethodPost:
		err = h.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		err = errorf(http.StatusMethodNotAllowed, "method %s not allowed on /files", r.Method)
	}
	if err != nil {
		writeJSONError(w, err)
	}
}

// user selects the request's user and resolves a path for it.
func (h *filesHandler) user(r *http.Request) (User, error) {
	u, err := h.opts.userFor(r.Header, r.URL.Query().Get("username"))
	if err != nil {
		if errors.Is(err, ErrUserNotAllowed) {
			return User{}, errorf(http.StatusForbidden, "%v", err)
		}
		return User{}, errorf(http.StatusUnauthorized, "%v", err)
	}
	return u, nil
}

func (h *filesHandler) resolve(p string, u User) (string, error) {
	abs, err := resolvePath(p, u, h.opts.DefaultWorkdir)
	if err != nil {
		return "", errorf(http.StatusBadRequest, "%v", err)
	}
	return abs, nil
}

func (h *filesHandler) download(w http.ResponseWriter, r *http.Request) error {
	u, err := h.user(r)
	if err != nil {
		return err
	}
	p, err := h.resolve(r.URL.Query().Get("path"), u)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return osHTTPError("open "+p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return osHTTPError("stat "+p, err)
	}
	if fi.IsDir() {
		return errorf(http.StatusBadRequest, "path %s is a directory", p)
	}
	if !fi.Mode().IsRegular() {
		return errorf(http.StatusBadRequest, "path %s is not a regular file", p)
	}
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(p)}))
	w.Header().Add("Vary", "Accept-Encoding")

	gz, ok := acceptGzip(r.Header.Get("Accept-Encoding"))
	if !ok {
		return errorf(http.StatusNotAcceptable, "unsupported Accept-Encoding %q: only gzip and identity are supported", r.Header.Get("Accept-Encoding"))
	}
	// Ranges address the stored bytes, so a Range request is served plain.
	if !gz || r.Header.Get("Range") != "" {
		http.ServeContent(w, r, filepath.Base(p), fi.ModTime(), f)
		return nil
	}
	ct := mime.TypeByExtension(filepath.Ext(p))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Encoding", "gzip")
	w.Header().Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	if r.Method == http.MethodHead {
		return nil
	}
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if _, err := io.CopyBuffer(zw, f, make([]byte, copyBufSize)); err != nil {
		return nil // headers are sent; the client sees a truncated body
	}
	_ = zw.Close()
	return nil
}

// acceptGzip reads Accept-Encoding: gz says gzip is wanted; ok is false
// when neither gzip nor identity is acceptable (406).
func acceptGzip(header string) (gz, ok bool) {
	if strings.TrimSpace(header) == "" {
		return false, true
	}
	identity, star := true, true
	identitySeen := false
	for item := range strings.SplitSeq(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		q := 1.0
		for prm := range strings.SplitSeq(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(prm), "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		switch name {
		case "gzip", "x-gzip":
			gz = q > 0
		case "identity":
			identity, identitySeen = q > 0, true
		case "*":
			star = q > 0
			if q > 0 {
				gz = true
			}
		}
	}
	if !identitySeen && !star {
		identity = false
	}
	return gz, gz || identity
}

// uploadedEntry is one element of the upload response.
type uploadedEntry struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (h *filesHandler) upload(w http.ResponseWriter, r *http.Request) error {
	u, err := h.user(r)
	if err != nil {
		return err
	}
	meta, err := uploadMetadata(r.Header)
	if err != nil {
		return err
	}
	queryPath := r.URL.Query().Get("path")
	ct := r.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	var out []uploadedEntry
	switch {
	case mt == "multipart/form-data":
		// MultipartReader streams part by part; ParseMultipartForm would
		// spool whole files to memory or temp files first.
		mr, err := r.MultipartReader()
		if err != nil {
			return errorf(http.StatusBadRequest, "invalid multipart body: %v", err)
		}
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return errorf(http.StatusBadRequest, "invalid multipart body: %v", err)
			}
			if part.FormName() != "file" {
				part.Close() // envd ignores other fields
				continue
			}
			dest := queryPath
			if dest == "" {
				// Part.FileName() keeps only the base name; the SDKs put
				// the full destination path there.
				dest, _ = partFilename(part.Header.Get("Content-Disposition"))
			}
			if dest == "" {
				part.Close()
				return errorf(http.StatusBadRequest, "no destination: give ?path= or a filename in the part's Content-Disposition")
			}
			e, err := h.store(dest, part, u, meta)
			part.Close()
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		if len(out) == 0 {
			return errorf(http.StatusBadRequest, "multipart body has no part named \"file\"")
		}
	case mt == "application/octet-stream" || mt == "":
		if queryPath == "" {
			return errorf(http.StatusBadRequest, "path query parameter is required for octet-stream uploads")
		}
		var body io.Reader = r.Body
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				return errorf(http.StatusBadRequest, "invalid gzip body: %v", err)
			}
			defer zr.Close()
			body = zr
		default:
			return errorf(http.StatusBadRequest, "unsupported Content-Encoding %q (only gzip)", enc)
		}
		e, err := h.store(queryPath, body, u, meta)
		if err != nil {
			return err
		}
		out = append(out, e)
	default:
		return errorf(http.StatusBadRequest, "unsupported Content-Type %q: use multipart/form-data or application/octet-stream", ct)
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(out)
}

// uploadMetadata collects X-Metadata-<key> headers (keys lowercased).
func uploadMetadata(h http.Header) (map[string]string, error) {
	var meta map[string]string
	for k, vs := range h {
		key, ok := strings.CutPrefix(strings.ToLower(k), "x-metadata-")
		if !ok || len(vs) == 0 {
			continue
		}
		if key == "" || strings.ContainsAny(key, "\x00") {
			return nil, errorf(http.StatusBadRequest, "invalid metadata header %q", k)
		}
		if meta == nil {
			meta = map[string]string{}
		}
		meta[key] = vs[0]
	}
	return meta, nil
}

// store writes src to dest (a client path) atomically: data goes to a temp
// file in the same directory which is renamed over dest only when complete,
// so a failed or aborted upload never leaves a partial file.
func (h *filesHandler) store(dest string, src io.Reader, u User, meta map[string]string) (uploadedEntry, error) {
	p, err := h.resolve(dest, u)
	if err != nil {
		return uploadedEntry{}, err
	}
	mode := fs.FileMode(0o644)
	uid, gid := int(u.UID), int(u.GID)
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() {
			return uploadedEntry{}, errorf(http.StatusBadRequest, "path %s is a directory", p)
		}
		// Overwriting keeps the file's mode and owner, as an O_TRUNC write would.
		mode = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	dir := filepath.Dir(p)
	if err := mkdirAllAs(dir, u); err != nil {
		return uploadedEntry{}, osHTTPError("create directory "+dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(p)+".upload-*")
	if err != nil {
		return uploadedEntry{}, osHTTPError("create "+p, err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	buf := make([]byte, copyBufSize)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr := tmp.Write(buf[:n]); werr != nil {
				return uploadedEntry{}, osHTTPError("write "+p, werr)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return uploadedEntry{}, errorf(http.StatusBadRequest, "reading upload of %s: %v", p, rerr)
		}
	}
	if err := tmp.Chmod(mode); err != nil {
		return uploadedEntry{}, osHTTPError("chmod "+p, err)
	}
	if asRoot() {
		if err := tmp.Chown(uid, gid); err != nil {
			return uploadedEntry{}, osHTTPError("chown "+p, err)
		}
	}
	if err := setMetadata(tmp, meta); err != nil {
		return uploadedEntry{}, err
	}
	if err := tmp.Close(); err != nil {
		return uploadedEntry{}, osHTTPError("write "+p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return uploadedEntry{}, osHTTPError("rename into "+p, err)
	}
	committed = true
	return uploadedEntry{Path: p, Name: filepath.Base(p), Type: "file", Metadata: meta}, nil
}

// setMetadata stores metadata as user.e2b.<key> xattrs (envd's scheme).
func setMetadata(f *os.File, meta map[string]string) error {
	for k, v := range meta {
		rc, err := f.SyscallConn()
		if err != nil {
			return err
		}
		var xerr error
		if err := rc.Control(func(fd uintptr) {
			xerr = unix.Fsetxattr(int(fd), metadataXattrPrefix+k, []byte(v), 0)
		}); err != nil {
			return err
		}
		if xerr != nil {
			if errors.Is(xerr, unix.ENOTSUP) {
				return errorf(http.StatusBadRequest, "file metadata is not supported on this filesystem (%s)", filepath.Dir(f.Name()))
			}
			return osHTTPError("set metadata on "+f.Name(), xerr)
		}
	}
	return nil
}

// partFilename extracts the filename parameter of a Content-Disposition
// header without stripping directories (the E2B SDKs send the full
// destination path there). It accepts what mime.ParseMediaType accepts,
// including RFC 2231 filename*, and falls back to a lenient scan for the
// unquoted or sloppy forms ParseMediaType rejects (e.g. an unquoted
// filename=/a/b, where '/' is not a token character).
func partFilename(cd string) (string, bool) {
	if _, params, err := mime.ParseMediaType(cd); err == nil {
		fn, ok := params["filename"]
		return fn, ok
	}
	rest := cd
	for {
		i := strings.IndexByte(rest, ';')
		if i < 0 {
			return "", false
		}
		rest = strings.TrimLeft(rest[i+1:], " \t")
		name, after, ok := strings.Cut(rest, "=")
		if !ok {
			return "", false
		}
		if !strings.EqualFold(strings.TrimSpace(name), "filename") {
			// Skip this parameter's value (quoted values may contain ';').
			after = strings.TrimLeft(after, " \t")
			if strings.HasPrefix(after, `"`) {
				_, n := unquote(after)
				rest = after[n:]
			} else {
				rest = after
			}
			continue
		}
		after = strings.TrimLeft(after, " \t")
		if strings.HasPrefix(after, `"`) {
			v, _ := unquote(after)
			return v, true
		}
		v, _, _ := strings.Cut(after, ";")
		return strings.TrimSpace(v), true
	}
}

// unquote reads a quoted-string at the start of s (which begins with '"'),
// handling backslash escapes; it returns the value and the bytes consumed.
// An unterminated string runs to the end of s.
func unquote(s string) (string, int) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), i + 1
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), len(s)
}
