// Package homeseed starts a sandbox's /home/user as a copy of its
// environment's: a sandbox of a template starts, as on E2B, with what the
// template's build left in its home (a cloned repository, pip install
// --user, dotfiles), while the home stays a size-bounded tmpfs of its own.
// Every variant copies with it: the namespaces level from the rootfs while
// it sets the sandbox up, the container agents (docker, gVisor, a
// Kubernetes pod) from a read-only seed directory as the sandbox's user
// before any user code runs.
package homeseed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The seed is a build's output, so every byte of it is hostile: it is
// walked by fd without following a symlink, each entry recreated as what
// it is (a symlink stays a symlink, resolved inside the sandbox later),
// special files left out, set-id bits dropped, and the home's size and
// inode bounds hold — a home larger than them refuses the sandbox.

// TooBig is in the error of a sandbox whose environment's /home/user is
// larger than the sandbox's home: a caller's configuration to change, not
// a failure; variants match it to answer ErrInvalidConfig.
const TooBig = "does not fit the sandbox's home"

// Dir is where the container agents find the seed: the environment's
// /home/user, mounted read-only (docker, gVisor) or carried by the
// environment's exported image (Kubernetes).
const Dir = "/.code-sandboxes-home"

// Limits bound the copy: the home's bytes and inodes (0: no bound) and,
// for the error, what the caller can change to give the home more room.
type Limits struct {
	Bytes, Inodes int64
	Hint          string
}

// RootfsHome is the host path of rootfs's home/user, to be mounted
// read-only at Dir for an agent to copy: "" when the rootfs has none. Both
// components must be directories, not symlinks, or a hostile rootfs could
// have the host's own files mounted into its sandbox.
func RootfsHome(rootfs string) (string, error) {
	p := rootfs
	for _, name := range []string{"home", "user"} {
		p = filepath.Join(p, name)
		st, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("the environment's /home/user: %w", err)
		}
		if !st.IsDir() {
			return "", fmt.Errorf("the environment's /home/user: %s is not a directory (a symlink?); the sandbox's home is a copy of its /home/user", p)
		}
	}
	return p, nil
}
