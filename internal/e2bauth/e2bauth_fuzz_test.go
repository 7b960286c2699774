package e2bauth

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzToken is shaped like the sandboxes' envd tokens (ids.Token: hex).
const fuzzToken = "0123456789abcdef0123456789abcdef01234567"

// FuzzCheckFileSignature: a /files URL's query, as anyone holding (or
// forging) a signed URL sends it. Properties: any query is refused with
// ErrBadSignature or accepted, never a panic; a URL signed as the SDKs sign
// it is accepted before its expiration and only then; and a signature
// verifies only the (operation, path, user, expiration) it was made for,
// never another one (no field may leak into its neighbour through the
// ':'-joined text the SDKs hash).
func FuzzCheckFileSignature(f *testing.F) {
	f.Add("path=%2Fhome%2Fuser%2Fa.txt&username=user&signature=v1_ni7CcYQPEe0mwNEqTVCN3MHmHfBERDua9sI4if5CHWs&signature_expiration=1796000000",
		"/home/user/a.txt", "user", int64(1796000000), true, "/home/user/a.txt", "root", int64(1796000000), true)
	f.Add("path=a&signature=v1_x&signature_expiration=-1", "/tmp/x", "", int64(0), false, "/tmp/x", "", int64(0), true)
	f.Add("signature=&path=", "a:b", "c", int64(5), false, "a", "b:c", int64(5), false)
	// A read of "p:write:u" as user "v" hashes the same text as a write of
	// "p" as user "u:read:v".
	f.Add("", "p:write:u", "v", int64(0), false, "p", "u:read:v", int64(0), true)
	f.Add("", "/x", "user", int64(1796000000), false, "/x", "user", int64(0), false)
	f.Fuzz(func(t *testing.T, rawQuery, path, user string, exp int64, write bool, path2, user2 string, exp2 int64, write2 bool) {
		now := time.Unix(1796000000, 0)
		// Any query: accepted only when it carries the signature of its own
		// fields, refused with ErrBadSignature otherwise.
		q, err := url.ParseQuery(rawQuery)
		if err == nil {
			for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", ""} {
				err := CheckFileSignature(m, q, fuzzToken, now)
				if err != nil && !errors.Is(err, ErrBadSignature) {
					t.Fatalf("%s %q: %v is not ErrBadSignature", m, rawQuery, err)
				}
				if err == nil && (m != "GET" && m != "HEAD" && m != "POST" || q.Get("signature") == "") {
					t.Fatalf("%s %q accepted", m, rawQuery)
				}
			}
		}
		if exp < 0 {
			exp = -exp
		}
		if exp2 < 0 {
			exp2 = -exp2
		}
		op, method := "read", "GET"
		if write {
			op, method = "write", "POST"
		}
		op2, method2 := "read", "GET"
		if write2 {
			op2, method2 = "write", "POST"
		}
		sig := FileSignature(path, op, user, fuzzToken, exp)
		signed := func(method, path, user string, exp int64) url.Values {
			v := url.Values{"path": {path}, "signature": {sig}}
			if user != "" {
				v.Set("username", user)
			}
			if exp != 0 {
				v.Set("signature_expiration", strconv.FormatInt(exp, 10))
			}
			// Through the wire form, as a request carries it.
			back, err := url.ParseQuery(v.Encode())
			if err != nil {
				t.Fatalf("query %q: %v", v.Encode(), err)
			}
			return back
		}
		// Round trip: signed as the SDKs do, accepted until it expires.
		err = CheckFileSignature(method, signed(method, path, user, exp), fuzzToken, now)
		valid := exp == 0 || now.Unix() <= exp
		switch {
		case err == nil && !valid:
			t.Fatalf("expired signature (exp %d) accepted", exp)
		case err != nil && valid && validUser(user):
			t.Fatalf("genuine signature for %s %q as %q (exp %d) refused: %v", op, path, user, exp, err)
		case err != nil && !valid && !errors.Is(err, ErrSignatureExpired) && validUser(user):
			t.Fatalf("genuine expired signature not told it expired: %v", err)
		}
		// Binding: the same signature for any other request is refused.
		same := op == op2 && path == path2 && user == user2 && exp == exp2
		if !same {
			if err := CheckFileSignature(method2, signed(method2, path2, user2, exp2), fuzzToken, now); err == nil {
				t.Fatalf("signature for %s %q as %q (exp %d) accepted for %s %q as %q (exp %d)", op, path, user, exp, op2, path2, user2, exp2)
			}
		}
	})
}

// validUser: a name CheckFileSignature takes (a Linux user name has no ':').
func validUser(u string) bool { return !strings.Contains(u, ":") }
