//go:build !linux

package envd

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// The agent runs inside a sandbox, which is always Linux: its files API
// leans on openat2 and procfs (procguard_linux.go), its watches on inotify
// (watch_linux.go) and its terminals on Linux's pty ioctls (pty_linux.go).
// These stubs only let the packages that import envd build elsewhere (on
// macOS, for the e2b variant); nothing there runs an agent.
var errUnsupported = errors.New("envd: the sandbox agent needs Linux (openat2, procfs, inotify); elsewhere use the e2b variant (E2B cloud or a Linux host running serve)")

// oPath: no O_PATH here; openNoMagic refuses anyway.
const oPath = unix.O_RDONLY

func openNoMagic(p string, flags int, mode uint32) (int, error) {
	return -1, &os.PathError{Op: "open", Path: p, Err: errUnsupported}
}

// onProc says yes: without a way to tell, a path is refused rather than
// served (the open before it refuses anyway).
func onProc(int) bool { return true }

func newDirWatcher(root string, recursive, includeEntry bool, queue int, dropWhenFull bool) (*dirWatcher, error) {
	return nil, &os.PathError{Op: "watch", Path: root, Err: errUnsupported}
}

func networkFS(string) (string, bool) { return "", false }

func openPTY() (master, slave *os.File, err error) { return nil, nil, errUnsupported }

func resizePTY(*os.File, uint32, uint32) error { return errUnsupported }
