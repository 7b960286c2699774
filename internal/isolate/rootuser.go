//go:build linux

package isolate

// Root inside the sandbox (Spec.HostRootUID): uid 0 of a user namespace
// nested in the sandbox's, mapped to an unprivileged host uid of its own,
// with no capability in any set, no_new_privs and the same seccomp filter as
// every other process of the sandbox. It owns what the sandbox gives it
// (/root, the files it creates on the root directory's tmpfs) and nothing of
// the host: the system directories stay read-only binds, and host files show
// as nobody's. It can't touch the agent (uid 1000): without CAP_KILL it
// can't signal it, the seccomp filter keeps ptrace and prlimit/setpriority
// of other processes from everyone, and the agent's /proc files are out of
// its reach because uid 0 is not mapped in the sandbox's own namespace — a
// non-dumpable process's /proc files belong to uid 0 of the namespace its
// memory was made in, where one exists: were root the sandbox's own uid 0,
// it could write the agent's oom_score_adj and have the OOM killer end it.
// In the sandbox's namespace (the agent's view) root is RootOuterUID, which
// /etc/passwd also names root. The nested namespace maps the user (1000,
// 100) too, so root sees the user's files as theirs.
//
// No process of the sandbox can setuid(0) (none holds CAP_SETUID), so root's
// processes come from a broker: stage 1 starts it as uid 0 before dropping
// its own capabilities; it hardens itself as stage 1 does (stage 3: every
// thread in place where chosen (ReexecEnv) and possible, else this thread
// and a re-exec)
// and listens on RootSocket (stage 4). `sudo` (SudoPath, this
// binary bound read-only) asks it to start a command as root with the
// caller's stdin, stdout and stderr, relays signals and exits as the command
// did. Anyone in the sandbox may ask, as E2B's user has passwordless sudo:
// root here is a convenience within the sandbox, not a privilege over it.

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// maxRootRequest bounds a request to the broker (argv and environment).
const maxRootRequest = 256 << 10

type rootRequest struct {
	// Op is "" (run Path with Args, Env, Dir and the three fds sent along)
	// or "open" (open Path as root with Flags and Perm, creating its parent
	// directories first with Mkdir, and send the fd back).
	Op    string   `json:"op,omitempty"`
	Path  string   `json:"path"`
	Args  []string `json:"args,omitempty"`
	Env   []string `json:"env,omitempty"`
	Dir   string   `json:"dir,omitempty"`
	Flags int      `json:"flags,omitempty"`
	Perm  uint32   `json:"perm,omitempty"`
	Mkdir bool     `json:"mkdir,omitempty"`
}

// RootAvailable reports whether this sandbox has a root user (its broker
// listens, or will before the sandbox reports ready); called inside the
// sandbox.
func RootAvailable() bool {
	if rootConfigured {
		return true
	}
	fi, err := os.Lstat(RootSocket)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// rootConfigured: this process is a sandbox's stage 2 (its agent) and the
// sandbox has a root user. Its broker may not listen yet (stage 2 starts
// its work before it waits for it, and the sandbox is ready only once the
// broker listens), so the agent can't go by the socket: it decided "no
// root" on a busy host (TestOfficialJSSDKCompat's root steps in CI).
var rootConfigured bool

// prepareRootUser runs in stage 1 while the new root is built at nr (the
// binary's fd comes from the host's mount namespace copy, which the pivot
// detaches): root's home and the broker's directory, owned by uid 0, and the
// sudo binary, read-only.
func prepareRootUser(nr string, cfg *childConfig) error {
	defer unix.Close(cfg.SudoFD)
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		// 0755, not 0700: anyone here may become root (sudo), so nothing
		// is kept from the user by it, and the user's kernels and the
		// agent can use /root as a working directory and list it.
		{RootHome, 0o755}, {RootDir, 0o755}, {RootDir + "/bin", 0o755}} {
		p := nr + d.path
		if err := os.Mkdir(p, d.mode); err != nil {
			return fmt.Errorf("root user: %w", err)
		}
		if err := os.Chown(p, RootOuterUID, RootOuterGID); err != nil {
			return fmt.Errorf("root user: %w", err)
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return fmt.Errorf("root user: %w", err)
		}
	}
	f, err := os.OpenFile(nr+SudoPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("root user: %w", err)
	}
	f.Close()
	if err := mount("/proc/self/fd/"+strconv.Itoa(cfg.SudoFD), nr+SudoPath, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("root user: %w", err)
	}
	if err := remountTreeReadOnly(nr + SudoPath); err != nil {
		return fmt.Errorf("root user: %w", err)
	}
	return nil
}

// sudoOnPath puts sudo into /usr/local/bin, which every PATH has (a login
// shell's too: Debian's /etc/profile resets PATH): a read-only overlay of a
// directory holding only a sudo script over the system's own, so nothing
// of /usr/local/bin is hidden and nothing can be written there. Runs after
// the pivot (every path is inside the sandbox's root); without
// /usr/local/bin, or where the kernel refuses the overlay, sudo is at
// SudoPath only.
func sudoOnPath() error {
	if fi, err := os.Lstat("/usr/local/bin"); err != nil || !fi.IsDir() {
		return nil
	}
	dir := RootDir + "/path"
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("root user: %w", err)
	}
	script := "#!/bin/sh\nexec " + SudoPath + " \"$@\"\n"
	if err := os.WriteFile(dir+"/sudo", []byte(script), 0o755); err != nil {
		return fmt.Errorf("root user: %w", err)
	}
	for _, p := range []string{dir + "/sudo", dir} {
		if err := os.Chown(p, RootOuterUID, RootOuterGID); err != nil {
			return fmt.Errorf("root user: %w", err)
		}
	}
	if err := unix.Mount("overlay", "/usr/local/bin", "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "lowerdir="+dir+":/usr/local/bin"); err != nil {
		fmt.Fprintf(os.Stderr, "isolate: sudo at %s only, not in /usr/local/bin: overlay: %v\n", SudoPath, err)
	}
	return nil
}
