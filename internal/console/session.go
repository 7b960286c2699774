package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"
)

// cookieName is the session cookie. Not __Host-: that prefix needs Secure,
// and serve is often reached over plain http on loopback.
const cookieName = "cs_console"

// Bounds of the session store: sessions live at most maxAge, and die after
// idle without a request; at most maxSessions at once (each is a few hundred
// bytes; past it, sign-ins are refused until some expire, rather than
// evicting someone who is signed in).
const (
	maxAge      = 12 * time.Hour
	idle        = time.Hour
	maxSessions = 10000
)

// session is a signed-in browser. It holds the key server-side: the key is
// never sent back to the browser.
type session struct {
	team    string
	key     string
	csrf    string
	created time.Time
	seen    time.Time
}

// sessions maps the sha256 of a session id to its session: a dump of the
// map (or a timing probe of the lookup) gives no usable id.
type sessions struct {
	mu sync.Mutex
	m  map[[32]byte]*session
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux ≥ 3.17 (Go 1.24+ panics instead)
	return hex.EncodeToString(b[:])
}

// create starts a fresh session, never one the browser named (no fixation).
func (s *sessions) create(team, key string, now time.Time) (id string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSessions {
		s.sweepLocked(now)
		if len(s.m) >= maxSessions {
			return "", false
		}
	}
	id = randomToken()
	s.m[sha256.Sum256([]byte(id))] = &session{team: team, key: key, csrf: randomToken(), created: now, seen: now}
	return id, true
}

func (s *sessions) sweepLocked(now time.Time) {
	for h, se := range s.m {
		if expired(se, now) {
			delete(s.m, h)
		}
	}
}

func expired(se *session, now time.Time) bool {
	return now.Sub(se.created) > maxAge || now.Sub(se.seen) > idle
}

// get finds the session of id, refreshing its idle time; an expired one is
// deleted.
func (s *sessions) get(id string, now time.Time) *session {
	if len(id) != 64 {
		return nil
	}
	h := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.m[h]
	if se == nil {
		return nil
	}
	if expired(se, now) {
		delete(s.m, h)
		return nil
	}
	se.seen = now
	cp := *se
	return &cp
}

func (s *sessions) delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, sha256.Sum256([]byte(id)))
}

// secure says whether the browser reached us over TLS: directly, or through
// a front that says so. Believing X-Forwarded-Proto only ever adds Secure
// (a forged header can only make this browser's own cookie unusable over
// plain http), so it needs no list of trusted fronts.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func setSessionCookie(w http.ResponseWriter, r *http.Request, id string) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/console", HttpOnly: true, Secure: secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: int(maxAge / time.Second)})
}

func clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/console", HttpOnly: true, Secure: secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

// sameOrigin refuses what a browser marks as coming from another site.
// Sec-Fetch-Site is sent by every current browser and is then what
// counts (a POST from one of our pages is same-origin; "none" or
// same-site is not ours); Origin, sent by all on POST, must then name us
// too, unless it is "null" (what Chromium sends under some referrer
// policies). A request with neither (curl, a test) passes here and still
// needs the CSRF token.
func sameOrigin(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	if site != "" && site != "same-origin" {
		return false
	}
	switch o := r.Header.Get("Origin"); o {
	case "":
	case "null":
		return site == "same-origin"
	default:
		host, ok := strings.CutPrefix(o, "http://")
		if !ok {
			host, ok = strings.CutPrefix(o, "https://")
		}
		if !ok || !strings.EqualFold(host, r.Host) {
			return false
		}
	}
	return true
}

func tokenEqual(a, b string) bool {
	return len(a) == len(b) && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
