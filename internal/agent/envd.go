package agent

import (
	"fmt"
	"net/http"
	"os"

	"github.com/code-sandboxes/code-sandboxes/internal/envd"
	"github.com/code-sandboxes/code-sandboxes/internal/sandboxenv"
)

// EnvdOptions configure the envd-compatible services of the agent.
type EnvdOptions struct {
	DefaultUser string // "user"
	Home        string // the default user's home, /home/user
	Workdir     string
	Env         map[string]string
	// Contract gives commands the sandbox contract's environment
	// (sandboxenv.Env: LANG, TZ, SHELL, …) under Env, as kernels get it.
	Contract bool
	// Sudo is the sandbox's sudo when it has a root user (the local
	// variant's, isolate.SudoPath), and Root that user's identity as the
	// agent sees it: the user "root" is then accepted, and its commands and
	// filesystem RPCs run through Sudo.
	Sudo string
	Root envd.User
	// OpenAs opens files as Root (isolate.RootOpen): /files for user root.
	OpenAs func(path string, flag int, perm os.FileMode, mkdir bool) (*os.File, error)
}

// sandboxUser answers for the sandbox contract's single user when the agent
// itself runs as that user (local variant): the host's /etc/passwd, which the
// sandbox sees read-only, knows nothing of uid 1000 being "user".
func sandboxUser(o EnvdOptions) func(string) (envd.User, error) {
	return func(name string) (envd.User, error) {
		if os.Geteuid() == 0 {
			u, err := envd.LookupUser(name)
			if err != nil && (name == "" || name == o.DefaultUser) {
				// An image without the contract's user (a bare test host): act
				// as ourselves rather than refuse every request.
				return envd.User{Name: o.DefaultUser, UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Home: o.Home}, nil
			}
			return u, err
		}
		if name == "" || name == o.DefaultUser {
			return envd.User{Name: o.DefaultUser, UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Home: o.Home}, nil
		}
		if name == "root" && o.Sudo != "" {
			return o.Root, nil
		}
		if o.Sudo == "" && name == "root" {
			return envd.User{}, fmt.Errorf("%w: %q: this sandbox has no root user (the local variant has one when its creator runs as root, unless local.Options.NoRootUser; elsewhere only the user %q)", envd.ErrUserNotAllowed, name, o.DefaultUser)
		}
		return envd.User{}, fmt.Errorf("%w: %q: this sandbox has only the user %q", envd.ErrUserNotAllowed, name, o.DefaultUser)
	}
}

// EnvdRoutes returns the envd handlers (process and filesystem services and
// /files) to mount on the agent, keyed by ServeMux pattern, and a function
// that ends every process and watch they started.
func EnvdRoutes(o EnvdOptions) (map[string]http.Handler, func()) {
	if o.DefaultUser == "" {
		o.DefaultUser = "user"
	}
	if o.Home == "" {
		o.Home = "/home/user"
	}
	// Commands get the sandbox contract's environment (LANG, TZ, SHELL, …)
	// and the user's variables, as kernels do. HOME, USER and LOGNAME are
	// left to envd, which sets them for the user a command runs as, unless
	// the caller set them. (Without Contract, as the standalone agent on a
	// host of its own, commands get only o.Env over the agent's PATH.)
	env := o.Env
	if o.Contract {
		env = sandboxenv.Env(o.Env)
		for _, k := range []string{"HOME", "USER", "LOGNAME"} {
			if _, set := o.Env[k]; !set {
				delete(env, k)
			}
		}
	}
	var openAs func(envd.User, string, int, os.FileMode, bool) (*os.File, error)
	if o.OpenAs != nil {
		openAs = func(u envd.User, path string, flag int, perm os.FileMode, mkdir bool) (*os.File, error) {
			if u.UID != o.Root.UID {
				return nil, fmt.Errorf("%w: files of uid %d", envd.ErrUserNotAllowed, u.UID)
			}
			return o.OpenAs(path, flag, perm, mkdir)
		}
	}
	opts := envd.Options{
		OpenAs:         openAs,
		Sudo:           o.Sudo,
		DefaultUser:    o.DefaultUser,
		LookupUser:     sandboxUser(o),
		Env:            func() map[string]string { return env },
		DefaultWorkdir: o.Workdir,
	}
	routes := map[string]http.Handler{}
	procs := envd.NewProcessService(opts)
	p, h := procs.Handler()
	routes[p] = h
	fs := envd.NewFilesystemService(opts)
	p, h = fs.Handler()
	routes[p] = h
	files := envd.NewFilesHandler(opts)
	routes["GET /files"] = files
	routes["POST /files"] = files
	return routes, func() { procs.Close(); fs.Close() }
}
