package envd

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// The files API is served by the agent, which runs as the sandbox's user:
// what it opens in /proc is its own process (/proc/self, /proc/1), whose
// entries user code is denied (the agent is not dumpable). A path that
// reaches /proc, directly, through a symlink user code planted
// (/home/user/x -> /proc/self/environ), or through one of /proc's magic
// links (/proc/self/fd/2: the agent's stderr, a host-side log for the local
// variant), would make the agent a confused deputy. So the files API does
// not reach /proc at all (the hostile suite's FilesSymlinks and
// FilesPathTraversal); code reads it instead.

// errProcMsg is why a path is refused.
const errProcMsg = "the files API does not reach /proc (it is served by the sandbox's agent, which would see its own process there): read /proc from code instead"

// procRefusal is nil when p (following symlinks, but no magic link) is not
// on procfs; for a path that does not exist yet, its deepest existing
// ancestor is checked.
func procRefusal(p string) error {
	q := p
	for {
		fd, err := openNoMagic(q, oPath|unix.O_CLOEXEC, 0)
		if err == nil {
			proc := onProc(fd)
			unix.Close(fd)
			if proc {
				return errors.New(errProcMsg)
			}
			return nil
		}
		if errors.Is(err, unix.ELOOP) {
			// A magic link, or a loop: neither is anything to serve.
			return errors.New(errProcMsg + " (the path crosses one of its magic links, or loops)")
		}
		if errors.Is(err, unix.ENOENT) && q != "/" && q != "." {
			q = filepath.Dir(q)
			continue
		}
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		// A path that can't be checked is refused, with why (guardProc
		// reports the error as the operation would have).
		return &os.PathError{Op: "check", Path: q, Err: err}
	}
}

// procRefusalOf is procRefusal of p; with follow false a final symlink is
// not followed (remove, move and stat act on the link itself; stat reports
// no target in /proc: entryInfoFrom).
func procRefusalOf(p string, follow bool) error {
	if p == "/proc" || strings.HasPrefix(p, "/proc/") {
		return errors.New(errProcMsg)
	}
	if !follow {
		if err := procRefusal(filepath.Dir(p)); err != nil {
			return err
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil
		}
	}
	return procRefusal(p)
}

// guardProc is procRefusalOf as a Connect error.
func guardProc(p string, follow bool) error {
	if err := procRefusalOf(p, follow); err != nil {
		if pe := (*os.PathError)(nil); errors.As(err, &pe) {
			return fsError(p, err)
		}
		return connect.NewError(connect.CodePermissionDenied, err)
	}
	return nil
}

// guardProcHTTP is procRefusalOf as an HTTP error.
func guardProcHTTP(p string, follow bool) error {
	if err := procRefusalOf(p, follow); err != nil {
		if pe := (*os.PathError)(nil); errors.As(err, &pe) {
			return osHTTPError(p, err)
		}
		return errorf(http.StatusForbidden, "%s: %v", p, err)
	}
	return nil
}

// procTarget: a symlink target that resolves into /proc.
func procTarget(target string) bool {
	return target == "/proc" || strings.HasPrefix(target, "/proc/")
}

// openFileNoMagic is os.OpenFile through openNoMagic.
func openFileNoMagic(p string, flags int, mode os.FileMode) (*os.File, error) {
	fd, err := openNoMagic(p, flags|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}
