// Package envd implements the E2B envd-compatible part of the in-sandbox
// agent: the Connect services process.Process and filesystem.Filesystem and
// the plain HTTP /files endpoint. The wire format follows E2B's envd exactly
// (see shared/reference/e2b-protocol.md §3) so that the official E2B SDKs
// work against our agent unchanged.
//
// Authentication with X-Access-Token is not done here: the agent wraps every
// handler. This package only selects the OS user a request acts as.
package envd

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
)

// DefaultKeepalive is the interval between keepalive events on streams whose
// client sent no Keepalive-Ping-Interval header (envd's default).
const DefaultKeepalive = 90 * time.Second

// User is the OS identity a request acts as.
type User struct {
	Name string
	UID  uint32
	GID  uint32
	Home string
}

// Options configure the services. The zero value works: user "user",
// users looked up in /etc/passwd, no global env, workdir = the user's home.
type Options struct {
	// DefaultUser is used when a request names no user; "" means "user".
	DefaultUser string
	// LookupUser maps a user name to its identity. nil means LookupUser
	// (passwd-based, restricted to the agent's own uid when not root).
	// Returning an error wrapping ErrUnknownUser gives unauthenticated,
	// ErrUserNotAllowed gives permission_denied.
	LookupUser func(name string) (User, error)
	// Sudo, when set, is the sandbox's sudo (the local variant's root user):
	// a process for a user whose uid is not the agent's own, which a
	// non-root agent can't setuid to, runs as `Sudo -u <name> -- cmd args…`,
	// and that user's filesystem RPCs run in a helper started the same way
	// (fshelper.go).
	Sudo string
	// OpenAs, when set, opens files for a user whose uid is not the agent's
	// own (the local variant's root, through its broker: isolate.RootOpen):
	// /files uploads and downloads for that user go through it. mkdir
	// creates the parent directories first, as that user.
	OpenAs func(u User, path string, flag int, perm os.FileMode, mkdir bool) (*os.File, error)
	// Env returns the global environment added to every process (E2B's
	// envVars from sandbox creation / init). May be nil.
	Env func() map[string]string
	// DefaultWorkdir is the cwd of processes that give none and the base of
	// empty paths; "" means the user's home.
	DefaultWorkdir string
	// Keepalive is the keepalive interval for streams when the client sent
	// no Keepalive-Ping-Interval header; 0 means DefaultKeepalive.
	Keepalive time.Duration
	// StallTimeout is how long a full subscriber queue may hold back a
	// process's output before that subscriber is cut off
	// (resource_exhausted); 0 means DefaultStallTimeout.
	StallTimeout time.Duration
}

// Errors a LookupUser function may wrap to pick the Connect code / HTTP status.
var (
	ErrUnknownUser    = errors.New("unknown user")
	ErrUserNotAllowed = errors.New("user not allowed")
)

func (o *Options) defaultUser() string {
	if o.DefaultUser == "" {
		return "user"
	}
	return o.DefaultUser
}

func (o *Options) keepalive() time.Duration {
	if o.Keepalive <= 0 {
		return DefaultKeepalive
	}
	return o.Keepalive
}

func (o *Options) lookup(name string) (User, error) {
	if o.LookupUser != nil {
		return o.LookupUser(name)
	}
	return lookupUser(name, o.defaultUser())
}

func (o *Options) globalEnv() map[string]string {
	if o.Env == nil {
		return nil
	}
	return o.Env()
}

// LookupUser resolves name through /etc/passwd. When the agent runs as root
// any passwd user is accepted. When it is not root it can only act as itself
// (it could not setuid anyway), so it accepts only names that denote its own
// uid: the passwd name of that uid, any passwd alias with the same uid,
// "user" (the E2B SDKs' default) or defaultUser. The local sandbox runs as
// uid 1000 inside a user namespace where passwd may not list it at all.
func LookupUser(name string) (User, error) { return lookupUser(name, "user") }

func lookupUser(name, defaultUser string) (User, error) {
	entries, _ := readPasswd("/etc/passwd")
	euid := uint32(os.Geteuid())
	if euid == 0 {
		for _, e := range entries {
			if e.Name == name {
				return e, nil
			}
		}
		return User{}, fmt.Errorf("%w: invalid username: %q (not in /etc/passwd)", ErrUnknownUser, name)
	}
	self := User{Name: name, UID: euid, GID: uint32(os.Getegid())}
	var known bool
	var nameHome, uidHome string
	for _, e := range entries {
		if e.UID == euid && uidHome == "" {
			uidHome = e.Home
		}
		if e.Name == name {
			known = true
			if e.UID != euid {
				return User{}, fmt.Errorf("%w: the agent runs as uid %d and cannot act as user %q (uid %d)", ErrUserNotAllowed, euid, name, e.UID)
			}
			self.GID, nameHome = e.GID, e.Home
		}
	}
	if !known && name != "user" && name != defaultUser {
		return User{}, fmt.Errorf("%w: invalid username: %q (the agent runs as uid %d only)", ErrUnknownUser, name, euid)
	}
	// The launcher sets HOME for the sandbox user; passwd is the fallback
	// because a sandbox may reuse the host's passwd, which does not know it.
	for _, h := range []string{os.Getenv("HOME"), nameHome, uidHome, "/"} {
		if h != "" {
			self.Home = h
			break
		}
	}
	return self, nil
}

// readPasswd parses a passwd(5) file. Malformed lines are skipped.
func readPasswd(path string) ([]User, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []User
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 7 || strings.HasPrefix(f[0], "#") {
			continue
		}
		var uid, gid uint32
		if _, err := fmt.Sscan(f[2], &uid); err != nil {
			continue
		}
		if _, err := fmt.Sscan(f[3], &gid); err != nil {
			continue
		}
		out = append(out, User{Name: f[0], UID: uid, GID: gid, Home: f[5]})
	}
	return out, nil
}

// requestUsername returns the user a request names: the username query
// parameter (for /files), else the Basic auth user name, else "".
func requestUsername(h http.Header, query string) (string, error) {
	if query != "" {
		return query, nil
	}
	auth := h.Get("Authorization")
	if auth == "" {
		return "", nil
	}
	scheme, cred, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", fmt.Errorf("%w: unsupported Authorization scheme (want Basic)", ErrUnknownUser)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", fmt.Errorf("%w: malformed Basic credentials", ErrUnknownUser)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name, nil
}

// userFor selects the request's user (query > Basic auth > default).
func (o *Options) userFor(h http.Header, query string) (User, error) {
	name, err := requestUsername(h, query)
	if err != nil {
		return User{}, err
	}
	if name == "" {
		name = o.defaultUser()
	}
	return o.lookup(name)
}

// connectUser is userFor with errors as Connect errors.
func (o *Options) connectUser(h http.Header) (User, error) {
	u, err := o.userFor(h, "")
	if err != nil {
		return User{}, userConnectError(err)
	}
	return u, nil
}

func userConnectError(err error) error {
	if errors.Is(err, ErrUserNotAllowed) {
		return connect.NewError(connect.CodePermissionDenied, err)
	}
	return connect.NewError(connect.CodeUnauthenticated, err)
}

// resolvePath turns a client path into a clean absolute path the way envd
// does: "~" and "~/x" are relative to the user's home, other relative paths
// are joined to the home, "" means the default workdir (or home).
func resolvePath(p string, u User, defaultWorkdir string) (string, error) {
	switch {
	case p == "":
		if defaultWorkdir != "" {
			return filepath.Clean(defaultWorkdir), nil
		}
		return filepath.Clean(u.Home), nil
	case p == "~":
		return filepath.Clean(u.Home), nil
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(u.Home, p[2:]), nil
	case strings.HasPrefix(p, "~"):
		return "", fmt.Errorf("path %q: ~user expansion is not supported", p)
	case filepath.IsAbs(p):
		return filepath.Clean(p), nil
	default:
		return filepath.Join(u.Home, p), nil
	}
}

// asRoot reports whether the agent can change file owners and process
// credentials; only then do we chown and setuid to the request's user.
func asRoot() bool { return os.Geteuid() == 0 }
