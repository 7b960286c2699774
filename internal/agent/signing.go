package agent

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// fileSignature is envd's signed-URL scheme for /files, as the E2B SDKs
// compute it: "v1_" + unpadded base64 of SHA-256 over
// "path:operation:user:token" (":expiry" appended when the URL expires, as
// Unix seconds). path and user are the query's own values, unresolved.
func fileSignature(path, operation, user, token, expiration string) string {
	raw := path + ":" + operation + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// checkFileSignature accepts a /files request signed for its method's
// operation (GET read, POST write), user and path, not expired at now.
func checkFileSignature(r *http.Request, token string, now time.Time) error {
	var op string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		op = "read"
	case http.MethodPost:
		op = "write"
	default:
		return errors.New("signed URLs are for reading (GET) and writing (POST) files only")
	}
	q := r.URL.Query()
	exp := q.Get("signature_expiration")
	if exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return errors.New("invalid signature_expiration: want Unix seconds")
		}
		if now.Unix() > n {
			return errors.New("signature is already expired")
		}
	}
	want := fileSignature(q.Get("path"), op, q.Get("username"), token, exp)
	if subtle.ConstantTimeCompare([]byte(q.Get("signature")), []byte(want)) != 1 {
		return errors.New("invalid signature")
	}
	return nil
}
