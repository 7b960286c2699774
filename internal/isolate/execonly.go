//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
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
// The copy is made once per version of the binary (its device, inode, size
// and modification time) and kept for the next sandboxes; the directory
// keeps the few most recent. Nobody but the caller can write to it (0700),
// nobody can read it (0111), and the sandbox executes it through a
// descriptor (/proc/self/fd/N), so the directory's mode doesn't matter to it.

// execOnlyMode is the copy's mode: execute only, for everyone.
const execOnlyMode = 0o111

// execOnlyKeep is how many copies (versions of the binary) a directory keeps.
const execOnlyKeep = 2

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
	name := fmt.Sprintf("exe-%x-%x-%x-%x.%x", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
	path := filepath.Join(dir, name)
	if f, err := openExecOnly(path, st.Size); err == nil {
		// Most recently used first when pruneExecOnly picks what to keep.
		now := time.Now()
		_ = os.Chtimes(path, now, now)
		return f, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := checkOwnDir(dir); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, ".exe-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // after a successful rename: a no-op
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
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Atomic: a concurrent Start that made the same copy replaces it
		// with an identical one.
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return nil, fmt.Errorf("copy %s to %s: %w", src.Name(), dir, err)
	}
	pruneExecOnly(dir, name)
	return openExecOnly(path, st.Size)
}

// openExecOnly opens path (O_PATH: nobody may read it) if it is what
// execOnlyCopy makes: a regular file of ours, of size size, mode 0111.
func openExecOnly(path string, size int64) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
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
		return nil, fmt.Errorf("%s is not an execute-only copy of ours", path)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// checkOwnDir refuses a directory someone else could put files in.
func checkOwnDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s must be a directory of uid %d that only it can write to", dir, os.Geteuid())
	}
	return nil
}

// pruneExecOnly removes all but the execOnlyKeep most recent copies (keep
// included), and temporary files left by a Start that died, once they are
// a minute old. A sandbox running a removed copy keeps running it (the
// inode lives while executed); only the root user's sudo, bound from the
// file's path at the start, needs it on disk, for the moment of the start.
func pruneExecOnly(dir, keep string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type ent struct {
		name string
		mod  time.Time
	}
	var copies []ent
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue
		}
		switch {
		case len(e.Name()) > 5 && e.Name()[:5] == ".exe-":
			if time.Since(info.ModTime()) > time.Minute {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		case len(e.Name()) > 4 && e.Name()[:4] == "exe-" && e.Name() != keep:
			copies = append(copies, ent{e.Name(), info.ModTime()})
		}
	}
	sort.Slice(copies, func(i, j int) bool { return copies[i].mod.After(copies[j].mod) })
	for i, c := range copies {
		if i+1 >= execOnlyKeep && time.Since(c.mod) > time.Minute {
			err := os.Remove(filepath.Join(dir, c.name))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return
			}
		}
	}
}
