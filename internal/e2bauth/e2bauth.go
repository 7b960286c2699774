// Package e2bauth holds the credentials E2B's data plane uses besides the
// envd access token, computed the same way by the sandbox's agent and by
// serve's proxy so that the proxy never has to add a credential the client
// did not present:
//
//   - the traffic access token (header E2B-Traffic-Access-Token), derived
//     from the envd access token so that the agent, which knows only the
//     latter, can check it on the interpreter's /contexts calls (the code
//     interpreter SDKs send it there instead of X-Access-Token);
//   - signed /files URLs (query signature and signature_expiration), as the
//     SDKs' getSignature computes them.
package e2bauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// TrafficHeader is the header E2B's SDKs send the traffic access token in.
const TrafficHeader = "E2B-Traffic-Access-Token"

// ErrBadSignature is a missing, wrong or expired file URL signature.
var ErrBadSignature = errors.New("invalid file URL signature")

// ErrSignatureExpired is a genuine signature past its expiration; its text
// is envd's answer, word for word (the SDKs' tests compare it).
var ErrSignatureExpired = errors.New("signature is already expired")

// TrafficToken derives a sandbox's traffic access token from its envd
// access token. It is a MAC, so it reveals nothing of the envd token: a
// holder of the traffic token (e.g. someone given a tunnel URL) can't
// derive the token that runs code and reads files.
func TrafficToken(accessToken string) string {
	if accessToken == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(accessToken))
	m.Write([]byte("code-sandboxes e2b traffic access token v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// Equal compares two secrets in constant time; an empty want never matches.
func Equal(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// FileSignature is the SDKs' getSignature: "v1_" and the unpadded standard
// base64 of sha256("path:operation:user:token[:expiration]"); expiration 0
// means none.
func FileSignature(path, operation, user, accessToken string, expiration int64) string {
	raw := path + ":" + operation + ":" + user + ":" + accessToken
	if expiration != 0 {
		raw += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// CheckFileSignature verifies the signature of a /files request: GET is a
// read, POST a write; path and username come from the query as the SDKs
// put them there.
func CheckFileSignature(method string, q url.Values, accessToken string, now time.Time) error {
	sig := q.Get("signature")
	if sig == "" || accessToken == "" {
		return ErrBadSignature
	}
	var op string
	switch method {
	case "GET", "HEAD":
		op = "read"
	case "POST":
		op = "write"
	default:
		return fmt.Errorf("%w: %s is neither a read nor a write", ErrBadSignature, method)
	}
	// The SDKs hash "path:operation:user:token", so a ':' in the user
	// would let a signature for one request verify another: a read of
	// "p:write:u" as "v" hashes the text of a write of "p" as "u:read:v".
	// With the user free of ':' (no Linux user name has one) the text
	// splits one way only, from its end.
	if u := q.Get("username"); strings.Contains(u, ":") {
		return fmt.Errorf("%w: username %q: a user name has no ':'", ErrBadSignature, u)
	}
	var exp int64
	if e := q.Get("signature_expiration"); e != "" {
		n, err := strconv.ParseInt(e, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%w: signature_expiration %q is not a unix time", ErrBadSignature, e)
		}
		exp = n
	}
	if !Equal(sig, FileSignature(q.Get("path"), op, q.Get("username"), accessToken, exp)) {
		return ErrBadSignature
	}
	// Only a signature we made is told it expired.
	if exp != 0 && now.Unix() > exp {
		return fmt.Errorf("%w: %w (at %s)", ErrBadSignature, ErrSignatureExpired, time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	return nil
}
