//go:build linux

package ctragent

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/agent"
)

// pauseCtl is a pausable agent's side of the handshake.
type pauseCtl struct {
	dir string
	// owner, when set, is the agent's own uid, which owns CtlDir: the
	// handshake's files and socket are made and read as that uid
	// (owncreds.go).
	owner int
	// fd is CtlDir opened while still root: once the agent is the sandbox
	// user it can't search the root-owned run directory any more, and
	// reaches CtlDir through /proc/self/fd/fd instead.
	fd int
}

// openPauseCtl opens CtlDir, which the host made the agent's (its own uid,
// or the sandbox user's) and group root's, 0770 (the agent binds it first
// as uid 0 and can't chown: it only has SETUID and SETGID). With an agent
// uid of its own the descriptor is let go (setOwner) and code in the
// sandbox can't enter CtlDir; without one the run directory above it is
// root's alone.
func openPauseCtl(runDir string) (*pauseCtl, error) {
	dir := filepath.Join(runDir, CtlDir)
	fd, err := syscall.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return &pauseCtl{dir: dir, fd: fd}, nil
}

// setOwner says that CtlDir is uid's (nil-safe). The agent then reaches
// it by its path (the run directory above it is searchable, CtlDir is
// that uid's alone) and lets go of its descriptor: one code in the
// sandbox could open again through /proc/1/fd.
func (p *pauseCtl) setOwner(uid int) {
	if p != nil {
		p.owner = uid
		_ = syscall.Close(p.fd)
		p.fd = -1
	}
}

// as runs fn as CtlDir's owner.
func (p *pauseCtl) as(fn func() error) error {
	if p.owner == 0 {
		return fn()
	}
	return asUID(p.owner, fn)
}

func (p *pauseCtl) path(name string) string {
	if p.fd < 0 {
		return filepath.Join(p.dir, name)
	}
	return "/proc/self/fd/" + strconv.Itoa(p.fd) + "/" + name
}

// requested reports whether the host asked for what (and takes the
// request).
func (p *pauseCtl) requested(what string) bool {
	f := p.path(RequestFile)
	ok := false
	_ = p.as(func() error {
		b, err := os.ReadFile(f)
		if err != nil || strings.TrimSpace(string(b)) != what {
			return nil
		}
		_ = os.Remove(f)
		ok = true
		return nil
	})
	return ok
}

// quiesce is the agent's Quiesce for this handshake (nil without one).
func (p *pauseCtl) quiesce(mode os.FileMode) *agent.Quiesce {
	if p == nil {
		return nil
	}
	req := make(chan os.Signal, 1)
	resume := make(chan os.Signal, 1)
	signal.Notify(req, syscall.SIGUSR2)
	signal.Notify(resume, syscall.SIGUSR1)
	reqc := make(chan struct{}, 1)
	resc := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-req:
				if !p.requested("quiesce") {
					continue
				}
				select {
				case reqc <- struct{}{}:
				default:
				}
			case <-resume:
				if !p.requested("resume") {
					continue
				}
				select {
				case resc <- struct{}{}:
				default:
				}
			}
		}
	}()
	return &agent.Quiesce{
		Request: reqc,
		Resume:  resc,
		Done: func() {
			// A SIGUSR1 sent before this quiesce must not end the next.
			select {
			case <-resc:
			default:
			}
			_ = p.as(func() error { return os.WriteFile(p.path(QuiescedFile), []byte("1"), 0o600) })
		},
		Relisten: func() (ln net.Listener, err error) {
			err = p.as(func() error {
				_ = os.Remove(p.path(QuiescedFile))
				sock := p.path(SocketFile)
				_ = os.Remove(sock)
				old := syscall.Umask(int(^mode & 0o777))
				defer syscall.Umask(old)
				ln, err = net.Listen("unix", sock)
				return err
			})
			return ln, err
		},
		Identity: func() (string, string, bool) {
			f := p.path(IdentityFile)
			var b []byte
			if err := p.as(func() (err error) {
				if b, err = os.ReadFile(f); err == nil {
					_ = os.Remove(f)
				}
				return err
			}); err != nil {
				return "", "", false
			}
			var id Identity
			if json.Unmarshal(b, &id) != nil || id.ID == "" || id.Token == "" {
				return "", "", false
			}
			return id.ID, id.Token, true
		},
	}
}
