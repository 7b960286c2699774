//go:build linux

package isolate

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// openRootfs validates Spec.Rootfs and opens it (O_PATH) for the child, which
// binds its entries from the fd: as root the child runs as an unprivileged
// host uid that may not be able to traverse the path to it (go test's 0700
// temp dirs), and the child mounts its new root over /tmp, where a rootfs may
// live. Nothing here writes to the rootfs.
func openRootfs(dir string) (*os.File, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("isolate: rootfs %s: %w", dir, err)
	}
	fd, err := unix.Open(abs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("isolate: rootfs %s does not exist", abs)
	case errors.Is(err, unix.ENOTDIR):
		return nil, fmt.Errorf("isolate: rootfs %s is not a directory", abs)
	case err != nil:
		return nil, fmt.Errorf("isolate: rootfs %s: %w", abs, err)
	}
	f := os.NewFile(uintptr(fd), abs)
	bad := func(format string, a ...any) (*os.File, error) {
		f.Close()
		return nil, fmt.Errorf("isolate: rootfs %s "+format, append([]any{abs}, a...)...)
	}
	// The host's root (by any path, bind mounts included) would show the
	// whole host, read-only but readable: that is never what is meant.
	var st, hostRoot unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return bad(": %v", err)
	}
	if err := unix.Stat("/", &hostRoot); err == nil && st.Dev == hostRoot.Dev && st.Ino == hostRoot.Ino {
		return bad("is the host's root directory; leave Spec.Rootfs empty for the host's system directories")
	}
	// The sandbox's identity (user 1000 in group 100, DESIGN §4) is bound
	// over /etc/passwd and /etc/group, and a bind needs an existing file:
	// without them this is no root filesystem, or an incomplete one.
	// NOFOLLOW: an absolute symlink would be judged against the host's root.
	var est unix.Stat_t
	if err := unix.Fstatat(fd, "etc", &est, unix.AT_SYMLINK_NOFOLLOW); err != nil || est.Mode&unix.S_IFMT != unix.S_IFDIR {
		return bad("has no /etc directory: not a root filesystem?")
	}
	for _, name := range []string{"etc/passwd", "etc/group"} {
		if err := unix.Fstatat(fd, name, &est, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return bad("has no /%s", name)
		}
	}
	return f, nil
}

// checkInterpreter fails early, with a message saying what to do, when the
// init binary is dynamically linked and its ELF interpreter is missing from
// the rootfs: stage 2 re-executes the binary after pivot_root, so the
// kernel looks the interpreter (and the loader the libraries) up in the
// rootfs. A static binary needs nothing from it.
func checkInterpreter(exe *os.File, path string, rootfs *os.File) error {
	ef, err := elf.NewFile(exe)
	if err != nil {
		return nil // not ELF (a script?): execve will say what it thinks
	}
	defer ef.Close()
	var interp string
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(p.Open(), unix.PathMax))
			if err != nil {
				return nil
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return nil
	}
	// RESOLVE_IN_ROOT: symlinks (lib64 -> usr/lib64, absolute ones too)
	// resolve as they will inside the sandbox.
	fd, err := unix.Openat2(int(rootfs.Fd()), interp, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		return nil // kernel before 5.6 (or a filter refusing openat2): cannot tell
	}
	if err != nil {
		if path == "/proc/self/exe" {
			if e, err := os.Executable(); err == nil {
				path = e
			}
		}
		return fmt.Errorf("isolate: %s is dynamically linked (ELF interpreter %s) and rootfs %s has no %s: build it with CGO_ENABLED=0 (a static binary), or use a rootfs with a compatible C library", path, interp, rootfs.Name(), interp)
	}
	unix.Close(fd)
	return nil
}

// reopenInChild opens the rootfs once more, through the child's view of the
// file system (/proc/<pid>/root): the source of a bind mount must belong to
// the mount namespace of whoever mounts, and the fd openRootfs made belongs
// to ours. It opens as us (the child's host uid may be unable to traverse the
// path), by the canonical path of the directory already opened, and checks
// that it got that same directory. The child is blocked on the sync socket
// meanwhile: its mount namespace is still an untouched copy of ours.
func reopenInChild(pid int, rootfs *os.File) (int, error) {
	canon, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(rootfs.Fd())))
	if err != nil || !strings.HasPrefix(canon, "/") {
		return -1, fmt.Errorf("rootfs %s: cannot tell its path (%q %v)", rootfs.Name(), canon, err)
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/root"+canon, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("rootfs %s: open in the sandbox's mount namespace: %w", rootfs.Name(), err)
	}
	var a, b unix.Stat_t
	if err := unix.Fstat(int(rootfs.Fd()), &a); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Fstat(fd, &b); err != nil || a.Dev != b.Dev || a.Ino != b.Ino {
		unix.Close(fd)
		return -1, fmt.Errorf("rootfs %s changed while the sandbox started", rootfs.Name())
	}
	return fd, nil
}

// socketPair returns a connected pair of unix stream sockets, close-on-exec
// (exec.Cmd clears that on the end it passes).
func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "sync-child"), os.NewFile(uintptr(fds[1]), "sync-parent"), nil
}

// receivedFD extracts the one fd of an SCM_RIGHTS control message.
func receivedFD(oob []byte) (int, error) {
	fds, err := receivedFDs(oob, 1)
	if err != nil {
		return -1, err
	}
	return fds[0], nil
}

// receivedFDs extracts the want fds of an SCM_RIGHTS control message.
func receivedFDs(oob []byte, want int) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		f, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return nil, err
		}
		fds = append(fds, f...)
	}
	if len(fds) != want {
		for _, f := range fds {
			unix.Close(f)
		}
		return nil, fmt.Errorf("expected %d fds from the parent, got %d", want, len(fds))
	}
	return fds, nil
}
