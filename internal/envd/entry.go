package envd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
)

// metadataXattrPrefix is where envd keeps per-file metadata (X-Metadata-*
// upload headers); EntryInfo.metadata shows it with the prefix stripped.
const metadataXattrPrefix = "user.e2b."

// idNames caches uid/gid → name from /etc/passwd and /etc/group. A ListDir of
// thousands of entries must not re-read those files per entry; the cache is
// refreshed when the files' mtime changes.
type idNames struct {
	mu      sync.Mutex
	checked time.Time // last time the files' mtimes were looked at
	stamp   [2]time.Time
	users   map[uint32]string
	groups  map[uint32]string
}

var names idNames

func (c *idNames) refresh() {
	if c.users != nil && time.Since(c.checked) < time.Second {
		return
	}
	c.checked = time.Now()
	st := [2]time.Time{}
	for i, p := range []string{"/etc/passwd", "/etc/group"} {
		if fi, err := os.Stat(p); err == nil {
			st[i] = fi.ModTime()
		}
	}
	if c.users != nil && st == c.stamp {
		return
	}
	c.stamp = st
	c.users = map[uint32]string{}
	c.groups = map[uint32]string{}
	if us, err := readPasswd("/etc/passwd"); err == nil {
		for _, u := range us {
			if _, dup := c.users[u.UID]; !dup {
				c.users[u.UID] = u.Name
			}
		}
	}
	if b, err := os.ReadFile("/etc/group"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) < 3 {
				continue
			}
			if gid, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				if _, dup := c.groups[uint32(gid)]; !dup {
					c.groups[uint32(gid)] = f[0]
				}
			}
		}
	}
}

// lookup returns owner and group names, falling back to the numeric ids.
func (c *idNames) lookup(uid, gid uint32) (string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refresh()
	u, ok := c.users[uid]
	if !ok {
		u = strconv.FormatUint(uint64(uid), 10)
	}
	g, ok := c.groups[gid]
	if !ok {
		g = strconv.FormatUint(uint64(gid), 10)
	}
	return u, g
}

// permString renders a mode like ls -l ("-rw-r--r--", "drwxr-xr-x",
// "lrwxrwxrwx"); Go's FileMode.String uses other letters ("L" for links).
func permString(m fs.FileMode) string {
	var b [10]byte
	switch {
	case m&fs.ModeDir != 0:
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	default:
		b[0] = '-'
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<(8-i)) != 0 {
			b[1+i] = rwx[i]
		} else {
			b[1+i] = '-'
		}
	}
	special := func(idx int, set bool, lower, upper byte) {
		if !set {
			return
		}
		if b[idx] == '-' {
			b[idx] = upper
		} else {
			b[idx] = lower
		}
	}
	special(3, m&fs.ModeSetuid != 0, 's', 'S')
	special(6, m&fs.ModeSetgid != 0, 's', 'S')
	special(9, m&fs.ModeSticky != 0, 't', 'T')
	return string(b[:])
}

func fileType(m fs.FileMode) fspb.FileType {
	switch {
	case m.IsDir():
		return fspb.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return fspb.FileType_FILE_TYPE_SYMLINK
	default:
		// Devices, pipes and sockets are reported as files, like envd:
		// the SDKs drop entries whose type they do not know.
		return fspb.FileType_FILE_TYPE_FILE
	}
}

// entryInfo describes path (not following a final symlink for the name and
// permissions, but reporting the type of its target, as envd does, so that
// a link to a directory lists as a directory with symlink_target set).
func entryInfo(path string) (*fspb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return entryInfoFrom(path, fi), nil
}

func entryInfoFrom(path string, fi fs.FileInfo) *fspb.EntryInfo {
	// Protobuf strings must be UTF-8: one file user code named with
	// invalid bytes would otherwise fail the whole listing (the hostile
	// suite's FilesOddNames). Such names list with U+FFFD in place of the
	// bad bytes.
	e := &fspb.EntryInfo{
		Name:         strings.ToValidUTF8(fi.Name(), "\uFFFD"),
		Path:         strings.ToValidUTF8(path, "\uFFFD"),
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  permString(fi.Mode()),
		ModifiedTime: timestamppb.New(fi.ModTime()),
		Type:         fileType(fi.Mode()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner, e.Group = names.lookup(st.Uid, st.Gid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err := filepath.EvalSymlinks(path); err == nil && !procTarget(target) && procRefusal(path) == nil {
			target = strings.ToValidUTF8(target, "\uFFFD")
			e.SymlinkTarget = &target
			if ti, err := os.Stat(target); err == nil {
				e.Type = fileType(ti.Mode())
				e.Mode = uint32(ti.Mode().Perm())
			}
		} else if target, err := os.Readlink(path); err == nil {
			// Dangling link, or one into /proc (what the agent would see
			// there is its own process: procguard.go): report the raw
			// target and the symlink type.
			target = strings.ToValidUTF8(target, "\uFFFD")
			e.SymlinkTarget = &target
		}
	}
	e.Metadata = readMetadata(path)
	return e
}

// readMetadata returns the user.e2b.* xattrs of path without the prefix, or
// nil (filesystems without xattr support simply have none).
func readMetadata(path string) map[string]string {
	var buf [1024]byte
	n, err := unix.Llistxattr(path, buf[:])
	if err != nil || n == 0 {
		return nil
	}
	var out map[string]string
	for name := range strings.SplitSeq(string(buf[:n]), "\x00") {
		key, ok := strings.CutPrefix(name, metadataXattrPrefix)
		if !ok || key == "" {
			continue
		}
		var val [4096]byte
		m, err := unix.Lgetxattr(path, name, val[:])
		if err != nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = string(val[:m])
	}
	return out
}

// fsError maps an OS error to a Connect error with a clear message: what
// was asked (what carries the path) and the reason once, not the OS
// error's own "op PATH: reason" again.
func fsError(what string, err error) error {
	reason := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		reason = pe.Err.Error()
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("%s: no such file or directory", what))
	case errors.Is(err, syscall.EROFS):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s: read-only file system (write under /home/user, /tmp, /files or a directory of your own at /)", what))
	case errors.Is(err, fs.ErrPermission):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s: permission denied", what))
	case errors.Is(err, fs.ErrExist):
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s: already exists", what))
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOTEMPTY):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %s", what, reason))
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%s: no space left (%s)", what, reason))
	default:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("%s: %s", what, reason))
	}
}

// mkdirAllAs creates dir and its missing parents, chowning each directory it
// creates to u when the agent is root (so a "user" upload to a new directory
// does not leave root-owned directories behind). Existing directories are left
// alone.
func mkdirAllAs(dir string, u User) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAllAs(parent, u); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Lost a race with another creator; fine if it is a directory.
			if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
				return nil
			}
		}
		return err
	}
	return chownTo(dir, u)
}

func chownTo(path string, u User) error {
	if !asRoot() {
		return nil
	}
	return os.Lchown(path, int(u.UID), int(u.GID))
}
