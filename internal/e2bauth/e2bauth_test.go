package e2bauth

import (
	"errors"
	"net/url"
	"testing"
	"time"
)

// The expected signatures were computed with node's crypto the way the JS
// SDK's getSignature does (sha256, base64, '=' stripped, "v1_" prefix).
func TestFileSignatureMatchesTheSDK(t *testing.T) {
	for _, c := range []struct {
		path, op, user string
		exp            int64
		want           string
	}{
		{"/home/user/a.txt", "read", "", 0, "v1_byj2OB/vujgbES/1KAKCaR27E+9eOrB6PzeTnIL8L6M"},
		{"/home/user/a.txt", "write", "user", 1796000000, "v1_ni7CcYQPEe0mwNEqTVCN3MHmHfBERDua9sI4if5CHWs"},
	} {
		if got := FileSignature(c.path, c.op, c.user, "tok123", c.exp); got != c.want {
			t.Errorf("FileSignature(%q, %q, %q, %d) = %s, want %s", c.path, c.op, c.user, c.exp, got, c.want)
		}
	}
}

func TestCheckFileSignature(t *testing.T) {
	now := time.Unix(1796000000, 0)
	q := url.Values{"path": {"/home/user/a.txt"}, "username": {"user"}, "signature": {"v1_ni7CcYQPEe0mwNEqTVCN3MHmHfBERDua9sI4if5CHWs"}, "signature_expiration": {"1796000000"}}
	if err := CheckFileSignature("POST", q, "tok123", now); err != nil {
		t.Errorf("valid write: %v", err)
	}
	for name, c := range map[string]struct {
		method string
		q      url.Values
		tok    string
		now    time.Time
	}{
		"expired":       {"POST", q, "tok123", now.Add(time.Second)},
		"read as write": {"GET", q, "tok123", now},
		"other token":   {"POST", q, "tok124", now},
		"other method":  {"DELETE", q, "tok123", now},
		"no token":      {"POST", q, "", now},
		"no signature":  {"POST", url.Values{"path": {"/home/user/a.txt"}}, "tok123", now},
		"other user":    {"POST", with(q, "username", "root"), "tok123", now},
		"bad expiry":    {"POST", with(q, "signature_expiration", "soon"), "tok123", now},
	} {
		err := CheckFileSignature(c.method, c.q, c.tok, c.now)
		if !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
		// Only a genuine signature is told it expired (envd's exact words,
		// which the SDKs' tests compare); a forged one is just invalid.
		if (name == "expired") != errors.Is(err, ErrSignatureExpired) {
			t.Errorf("%s: %v: ErrSignatureExpired is for a genuine, expired signature only", name, err)
		}
	}
	if err := CheckFileSignature("POST", q, "tok124", now.Add(time.Hour)); errors.Is(err, ErrSignatureExpired) {
		t.Errorf("an expired forgery is told it expired: %v", err)
	}
}

func with(q url.Values, k, v string) url.Values {
	out := url.Values{}
	for kk, vv := range q {
		out[kk] = append([]string(nil), vv...)
	}
	out.Set(k, v)
	return out
}

func TestTrafficToken(t *testing.T) {
	a, b := TrafficToken("tok-a"), TrafficToken("tok-b")
	if a == b || len(a) != 64 || a == "tok-a" || TrafficToken("") != "" || a != TrafficToken("tok-a") {
		t.Errorf("traffic tokens %q %q", a, b)
	}
	if Equal("", "") || !Equal(a, a) || Equal(a, b) {
		t.Error("Equal")
	}
}
