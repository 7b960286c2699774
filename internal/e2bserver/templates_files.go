// A COPY step's archive over HTTP: the upload link the SDK asks for and the
// upload itself (what the server keeps and for how long:
// templates_uploads.go).

package e2bserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func (t *templateStore) uploadPath(team, hash string) string {
	return filepath.Join(t.teamDir(team), "files", hash+".tar")
}

func (t *templateStore) uploadToken(team, templateID, hash string, expires int64) string {
	m := hmac.New(sha256.New, t.secret[:])
	fmt.Fprintf(m, "%s\x00%s\x00%s\x00%d", team, templateID, hash, expires)
	return hex.EncodeToString(m.Sum(nil))
}

func (s *Server) fileUploadLink(w http.ResponseWriter, r *http.Request) {
	tp, team, ok := s.ownTemplate(w, r)
	if !ok {
		return
	}
	hash := r.PathValue("hash")
	if !filesHashRE.MatchString(hash) {
		writeError(w, http.StatusBadRequest, "files hash %q: give the SDK's 64 hex digits", hash)
		return
	}
	s.templates.maybeSweep()
	if p := s.templates.uploadPath(team, hash); fileExists(p) {
		now := time.Now()
		_ = os.Chtimes(p, now, now) // asked for: in use again
		writeJSON(w, http.StatusCreated, map[string]any{"present": true})
		return
	}
	// The SDK PUTs the archive to this URL without its API key (it is an
	// S3 presigned URL at E2B): the signature stands for the key, for this
	// team, template and hash only, for an hour.
	expires := time.Now().Add(uploadURLLifetime).Unix()
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u := fmt.Sprintf("%s://%s/templates/%s/files/%s/upload?team=%s&expires=%d&signature=%s", scheme, r.Host, tp.ID, hash,
		hex.EncodeToString([]byte(team)), expires, s.templates.uploadToken(team, tp.ID, hash, expires))
	writeJSON(w, http.StatusCreated, map[string]any{"present": false, "url": u})
}

// isUpload reports whether r is a signed archive upload (served without
// an API key).
func isUpload(r *http.Request) bool {
	return r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/templates/") && strings.HasSuffix(r.URL.Path, "/upload") &&
		r.URL.Query().Has("signature")
}

// upload stores a copy step's archive from a signed URL.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/templates/"), "/")
	q := r.URL.Query()
	teamRaw, err := hex.DecodeString(q.Get("team"))
	expires, err2 := strconv.ParseInt(q.Get("expires"), 10, 64)
	if len(parts) != 4 || parts[1] != "files" || !filesHashRE.MatchString(parts[2]) || err != nil || err2 != nil {
		writeError(w, http.StatusBadRequest, "malformed upload URL")
		return
	}
	team, tplID, hash := string(teamRaw), parts[0], parts[2]
	want := s.templates.uploadToken(team, tplID, hash, expires)
	if !hmac.Equal([]byte(want), []byte(q.Get("signature"))) || time.Now().Unix() > expires {
		s.metrics.refused.WithLabelValues("token").Inc()
		writeError(w, http.StatusForbidden, "the upload URL's signature is wrong or expired; ask for a new one")
		return
	}
	if r.ContentLength > maxUploadBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "an upload may be at most %d bytes", maxUploadBytes)
		return
	}
	s.templates.maybeSweep()
	// Set the bytes aside before reading any: uploads of a team in
	// parallel share its quota, never each pass it alone.
	size := int64(maxUploadBytes)
	if r.ContentLength >= 0 {
		size = r.ContentLength
	}
	limit, release := s.templates.reserveUpload(team, size)
	defer release()
	if limit < size && r.ContentLength >= 0 || limit == 0 && size > 0 {
		writeError(w, http.StatusRequestEntityTooLarge, "%s", s.templates.quotaError(team, r.ContentLength))
		return
	}
	dst := s.templates.uploadPath(team, hash)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".upload-")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r.Body, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		writeError(w, http.StatusBadRequest, "reading the upload: %v", err)
		return
	case n > maxUploadBytes:
		writeError(w, http.StatusRequestEntityTooLarge, "an upload may be at most %d bytes", maxUploadBytes)
		return
	case n > limit:
		writeError(w, http.StatusRequestEntityTooLarge, "%s", s.templates.quotaError(team, -1))
		return
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	w.WriteHeader(http.StatusOK)
}
