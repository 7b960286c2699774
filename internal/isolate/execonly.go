//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// An execute-only copy of the sandbox's binary (Spec.ExecOnlyDir): the
// sandbox's processes run the binary from a file they may execute but not
// read. The kernel then makes every process that executes it not dumpable
// from its first instruction (would_dump in fs/exec.c), where a process that
// makes itself so (PR_SET_DUMPABLE) is dumpable until it gets there: the
// sandbox's init re-executes itself into its agent (stage 2) after it has
// started the sandbox's kernel early, and until the agent's own prctl, the
// kernel's process (the same user) could open the agent's memory and fds
// through /proc (TestEarlyStartCantReachStage1/re-exec,_later).
//
// The copy is made once per version of the binary (its device, inode, size,
// modification and change times) and kept for the next sandboxes; the
// directory keeps the four most recently used (a sandbox's binary and
// stage 1's, Spec.Init, and the versions before both were upgraded, for
// sandboxes started meanwhile). Nobody but the caller can
// write to it (0700), nobody can read it (0111), and the sandbox executes it
// through a descriptor (/proc/self/fd/N), so the directory's mode doesn't
// matter to it.

// execOnlyMode is the copy's mode: execute only, for everyone.
const execOnlyMode = 0o111

// execOnlyKeep is how many copies (versions of the binary) a directory keeps.
const execOnlyKeep = 4

// execOnlyCopy returns an O_PATH descriptor of the execute-only copy of src
// (an open file of the binary) in dir, making the copy if there is none.
func execOnlyCopy(dir string, src *os.File) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", src.Name())
	}
	// ctime too: a binary rewritten in place keeping its size and mtime
	// (cp -p, rsync -t --inplace) gets a new copy.
	name := fmt.Sprintf("exe-%x-%x-%x-%x.%x-%x.%x", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	d, err := openOwnDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if f, err := openExecOnly(d, name, st.Size); err == nil {
		return f, nil
	}
	tmp, err := os.CreateTemp(dir, ".exe-*")
	if err != nil {
		return nil, err
	}
	tmpName := filepath.Base(tmp.Name())
	defer unix.Unlinkat(int(d.Fd()), tmpName, 0) // once linked: the copy keeps its own name
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		tmp.Close()
		return nil, err
	}
	// ReadFrom uses copy_file_range where the filesystems allow.
	n, err := tmp.ReadFrom(io.LimitReader(src, st.Size))
	if err == nil && n != st.Size {
		err = fmt.Errorf("copied %d of %d bytes", n, st.Size)
	}
	if err == nil {
		err = tmp.Chmod(execOnlyMode)
	}
	if err == nil {
		err = tmp.Sync() // never a copy of the right size with lost data after a crash
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("copy %s to %s: %w", src.Name(), dir, err)
	}
	// A link, not a rename: a concurrent Start that made the same copy
	// first keeps its file (which it may be about to bind as sudo, by its
	// path), and we use that one.
	err = unix.Linkat(int(d.Fd()), tmpName, int(d.Fd()), name, 0)
	if errors.Is(err, unix.EEXIST) {
		if f, oerr := openExecOnly(d, name, st.Size); oerr == nil {
			return f, nil
		}
		// Not a copy of ours (debris, or made by hand): replace it.
		err = unix.Renameat(int(d.Fd()), tmpName, int(d.Fd()), name)
	}
	if err != nil {
		return nil, fmt.Errorf("copy %s to %s: %w", src.Name(), dir, err)
	}
	pruneExecOnly(d, name)
	return openExecOnly(d, name, st.Size)
}

// openExecOnly opens name in d (O_PATH: nobody may read it) if it is what
// execOnlyCopy makes: a regular file of ours, of size size, mode 0111. It
// marks it used now (pruneExecOnly keeps the most recently used).
func openExecOnly(d *os.File, name string, size int64) (*os.File, error) {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o7777 != execOnlyMode || st.Size != size || int(st.Uid) != os.Geteuid() {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not an execute-only copy of ours", name)
	}
	// Through /proc: an O_PATH descriptor takes no futimens.
	now := unix.NsecToTimespec(time.Now().UnixNano())
	_ = unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), []unix.Timespec{now, now}, 0)
	return os.NewFile(uintptr(fd), filepath.Join(d.Name(), name)), nil
}

// openOwnDir opens dir, refusing one that isn't a directory of ours that
// only we can write to (a link in its place included).
func openOwnDir(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		var st unix.Stat_t
		if err = unix.Fstat(fd, &st); err == nil && (int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0) {
			err = errors.New("not a directory of ours that only we can write to")
		}
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s must be a directory of uid %d that only it can write to: %w", dir, os.Geteuid(), err)
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// pruneExecOnly removes all but the execOnlyKeep most recent copies (keep
// included), and temporary files left by a Start that died, once they are
// a minute old. A sandbox running a removed copy keeps running it (the
// inode lives while executed); only the root user's sudo, bound from the
// file's path at the start, needs it on disk, for the moment of the start.
func pruneExecOnly(d *os.File, keep string) {
	ents, err := os.ReadDir(d.Name())
	if err != nil {
		return
	}
	type ent struct {
		name string
		mod  time.Time
	}
	// old reports whether name was last used over a minute ago, asked
	// again right before a removal: the listing may be stale by then (a
	// Start of another process may have just used it).
	old := func(name string) bool {
		var st unix.Stat_t
		if unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return false
		}
		return time.Since(time.Unix(st.Mtim.Unix())) > time.Minute
	}
	var copies []ent
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue
		}
		switch n := e.Name(); {
		case strings.HasPrefix(n, ".exe-"):
			if old(n) {
				_ = unix.Unlinkat(int(d.Fd()), n, 0)
			}
		case strings.HasPrefix(n, "exe-") && n != keep:
			copies = append(copies, ent{n, info.ModTime()})
		}
	}
	sort.Slice(copies, func(i, j int) bool { return copies[i].mod.After(copies[j].mod) })
	for i, c := range copies {
		if i+1 >= execOnlyKeep && old(c.name) {
			_ = unix.Unlinkat(int(d.Fd()), c.name, 0)
		}
	}
}
