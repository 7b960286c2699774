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
		return errorf(http.StatusForbidden, "%s: read-only file system (write under /home/user, /tmp, /files or a directory of your own at /)", what)
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
	var f *os.File
	var fi fs.FileInfo
	if h.alien(u) {
		f, fi, err = h.openRegularAs(u, p)
	} else {
		f, fi, err = openRegular(p)
	}
	if err != nil {
		return err
	}
	defer f.Close()
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

// openRegular opens p for reading only if it is a regular file. The path
// is opened O_PATH first (which never blocks nor has an open's side
// effects: a FIFO would block until a writer came, a device could do
// anything) and checked; the file is then reopened through that very fd,
// so what is read is what was checked.
func openRegular(p string) (*os.File, fs.FileInfo, error) {
	if err := guardProcHTTP(p, true); err != nil {
		return nil, nil, err
	}
	// No magic links, and the file opened is checked not to be procfs's
	// (procguard.go): race-free, whatever user code swaps in meanwhile.
	fd, err := openNoMagic(p, oPath|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, nil, guardProcHTTP("/proc", true)
	}
	if err != nil {
		return nil, nil, osHTTPError("open "+p, err)
	}
	defer unix.Close(fd)
	if onProc(fd) {
		return nil, nil, guardProcHTTP("/proc", true)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, osHTTPError("stat "+p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return nil, nil, errorf(http.StatusBadRequest, "path %s is a directory", p)
	default:
		return nil, nil, errorf(http.StatusBadRequest, "path %s is not a regular file", p)
	}
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, osHTTPError("open "+p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, osHTTPError("stat "+p, err)
	}
	return f, fi, nil
}

// alien: u is a user the agent can't act as itself (not root, other uid),
// whose files go through Options.OpenAs.
func (h *filesHandler) alien(u User) bool {
	return h.opts.OpenAs != nil && !asRoot() && u.UID != uint32(os.Geteuid())
}

// openRegularAs is openRegular for an alien user: opened by OpenAs
// (non-blocking, so a FIFO can't hold it), then checked.
func (h *filesHandler) openRegularAs(u User, p string) (*os.File, fs.FileInfo, error) {
	f, err := h.opts.OpenAs(u, p, os.O_RDONLY|syscall.O_NONBLOCK, 0, false)
	if err != nil {
		return nil, nil, osHTTPError("open "+p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, osHTTPError("stat "+p, err)
	}
	switch {
	case fi.IsDir():
		f.Close()
		return nil, nil, errorf(http.StatusBadRequest, "path %s is a directory", p)
	case !fi.Mode().IsRegular():
		f.Close()
		return nil, nil, errorf(http.StatusBadRequest, "path %s is not a regular file", p)
	}
	return f, fi, nil
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

// Metadata bounds, as envd's: a key fits the VFS xattr-name limit (255)
// minus the prefix, and all of a file's metadata (prefix counted per key)
// fits one inode's xattr budget.
const (
	maxMetadataKey   = 255 - len(metadataXattrPrefix)
	maxMetadataTotal = 4096
)

// uploadMetadata collects X-Metadata-<key> headers (keys lowercased; the
// first value of a repeated header). Keys and values must be printable
// US-ASCII, within envd's size caps.
func uploadMetadata(h http.Header) (map[string]string, error) {
	var meta map[string]string
	total := 0
	for k, vs := range h {
		key, ok := strings.CutPrefix(strings.ToLower(k), "x-metadata-")
		if !ok || len(vs) == 0 {
			continue
		}
		if key == "" || !printableASCII(key) || len(key) > maxMetadataKey {
			return nil, errorf(http.StatusBadRequest, "invalid metadata key %q: 1 to %d printable US-ASCII bytes", key, maxMetadataKey)
		}
		if !printableASCII(vs[0]) {
			return nil, errorf(http.StatusBadRequest, "invalid metadata value for key %q: printable US-ASCII only", key)
		}
		total += len(metadataXattrPrefix) + len(key) + len(vs[0])
		if total > maxMetadataTotal {
			return nil, errorf(http.StatusBadRequest, "metadata too large: over %d bytes (keys, values and the %q prefix per key)", maxMetadataTotal, metadataXattrPrefix)
		}
		if meta == nil {
			meta = map[string]string{}
		}
		meta[key] = vs[0]
	}
	return meta, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// store writes src to dest (a client path) in place, as envd does: the
// target is created (0644, owned by the user) or opened, truncated and
// written, so watchers see CREATE/WRITE on its own name and never a
// temporary one. An upload that fails midway removes a file it created; an
// overwritten file keeps what had arrived (envd's behaviour too). Only regular files are written: anything else at the path
// (a FIFO, a device, a socket) is refused before it is opened for writing,
// and the open is non-blocking and re-checked, so a FIFO swapped in between
// can neither block the handler nor be written to.
func (h *filesHandler) store(dest string, src io.Reader, u User, meta map[string]string) (_ uploadedEntry, rerr error) {
	p, err := h.resolve(dest, u)
	if err != nil {
		return uploadedEntry{}, err
	}
	if err := guardProcHTTP(p, true); err != nil {
		return uploadedEntry{}, err
	}
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() {
			return uploadedEntry{}, errorf(http.StatusBadRequest, "path %s is a directory", p)
		}
		if !fi.Mode().IsRegular() {
			return uploadedEntry{}, errorf(http.StatusBadRequest, "path %s is not a regular file (%s): refusing to write to it", p, fi.Mode().Type())
		}
	}
	dir := filepath.Dir(p)
	// Never through a magic link (/proc/self/fd/…): see procguard.go.
	open := openFileNoMagic
	if h.alien(u) {
		// The user's own broker creates the directories and the file.
		open = func(name string, flag int, perm os.FileMode) (*os.File, error) {
			return h.opts.OpenAs(u, name, flag, perm, true)
		}
	} else if err := mkdirAllAs(dir, u); err != nil {
		return uploadedEntry{}, osHTTPError("create directory "+dir, err)
	}
	const flags = os.O_WRONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	created := true
	f, err := open(p, flags|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		created = false
		f, err = open(p, flags, 0)
	}
	if errors.Is(err, syscall.ELOOP) {
		return uploadedEntry{}, guardProcHTTP("/proc", true)
	}
	if err == nil && onProc(int(f.Fd())) {
		f.Close()
		return uploadedEntry{}, guardProcHTTP("/proc", true)
	}
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			return uploadedEntry{}, errorf(http.StatusBadRequest, "path %s is not a regular file: refusing to write to it", p)
		}
		return uploadedEntry{}, osHTTPError("open "+p, err)
	}
	defer func() {
		f.Close()
		if rerr != nil && created {
			os.Remove(p)
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return uploadedEntry{}, osHTTPError("stat "+p, err)
	}
	if !fi.Mode().IsRegular() {
		return uploadedEntry{}, errorf(http.StatusBadRequest, "path %s is not a regular file (%s): refusing to write to it", p, fi.Mode().Type())
	}
	if created {
		// The umask may have narrowed 0644; a new upload is 0644 as envd's
		// (no chmod otherwise: watchers would see a CHMOD envd never sends).
		if fi.Mode().Perm() != 0o644 {
			if err := f.Chmod(0o644); err != nil {
				return uploadedEntry{}, osHTTPError("chmod "+p, err)
			}
		}
		if asRoot() {
			if err := f.Chown(int(u.UID), int(u.GID)); err != nil {
				return uploadedEntry{}, osHTTPError("chown "+p, err)
			}
		}
	} else if err := f.Truncate(0); err != nil {
		// Overwriting keeps the file's mode and owner, as an O_TRUNC write.
		return uploadedEntry{}, osHTTPError("truncate "+p, err)
	}
	buf := make([]byte, copyBufSize)
	for {
		n, readErr := src.Read(buf)
		if n > 0 {
			if _, werr := f.Write(buf[:n]); werr != nil {
				return uploadedEntry{}, osHTTPError("write "+p, werr)
			}
		}
		if errors.Is(readErr, io.EOF) {
			break
		}
		if readErr != nil {
			return uploadedEntry{}, errorf(http.StatusBadRequest, "reading upload of %s: %v", p, readErr)
		}
	}
	if err := replaceMetadata(f, meta); err != nil {
		return uploadedEntry{}, err
	}
	if err := f.Close(); err != nil {
		return uploadedEntry{}, osHTTPError("write "+p, err)
	}
	return uploadedEntry{Path: p, Name: filepath.Base(p), Type: "file", Metadata: meta}, nil
}

// replaceMetadata makes meta the file's user.e2b.* xattrs (envd's scheme):
// keys stored before and absent now are removed, so an upload without
// metadata clears it.
func replaceMetadata(f *os.File, meta map[string]string) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var xerr error
	if err := rc.Control(func(fd uintptr) {
		var names [64 << 10]byte
		n, err := unix.Flistxattr(int(fd), names[:])
		if err != nil {
			if !errors.Is(err, unix.ENOTSUP) {
				xerr = err
				return
			}
			n = 0
		}
		for name := range strings.SplitSeq(string(names[:n]), "\x00") {
			key, ok := strings.CutPrefix(name, metadataXattrPrefix)
			if !ok {
				continue
			}
			if _, keep := meta[key]; keep {
				continue
			}
			if err := unix.Fremovexattr(int(fd), name); err != nil && !errors.Is(err, unix.ENODATA) {
				xerr = err
				return
			}
		}
		for k, v := range meta {
			if err := unix.Fsetxattr(int(fd), metadataXattrPrefix+k, []byte(v), 0); err != nil {
				xerr = err
				return
			}
		}
	}); err != nil {
		return err
	}
	if xerr != nil {
		if errors.Is(xerr, unix.ENOTSUP) {
			return errorf(http.StatusBadRequest, "file metadata is not supported on this filesystem (%s)", filepath.Dir(f.Name()))
		}
		return osHTTPError("set metadata on "+f.Name(), xerr)
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
