package e2bserver

import (
	"crypto/subtle"
	"net/http"

	"github.com/code-sandboxes/code-sandboxes/internal/console"
)

// withConsole is the listener's handler: the server, with the web console
// (internal/console) in front of it when on. A request for a sandbox (the
// SDKs' routing headers, a <port>-<id>.<domain> host) or one that already
// went through us is always the server's: a sandbox's tunnel host never
// reaches the console's pages or cookies.
func (s *Server) withConsole(on bool) http.Handler {
	if !on {
		return s
	}
	c := console.New(console.Options{Backend: s, Team: s.teamOf, Logger: s.log})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := sandboxTarget(r); ok || len(r.Header.Values(viaHeader)) > 0 || !console.Handles(r) {
			s.ServeHTTP(w, r)
			return
		}
		c.ServeHTTP(w, r)
	})
}

// teamOf is the team of an accepted key (checkKey's constant-time match).
func (s *Server) teamOf(key string) (string, bool) {
	if !ValidAPIKey(key) {
		return "", false
	}
	r := &http.Request{Header: http.Header{"X-Api-Key": {key}}}
	k, ok := s.checkKey(r)
	if !ok || subtle.ConstantTimeCompare([]byte(k.Key), []byte(key)) != 1 {
		return "", false
	}
	return k.Team, true
}
