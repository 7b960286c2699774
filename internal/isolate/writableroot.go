//go:build linux

package isolate

import "fmt"

// rootTmpfsData is the mount data of the tmpfs that becomes the sandbox's
// root directory. It holds the mount points of the read-only system
// directories (or of the rootfs's entries) and the sandbox's own mounts, and
// it is writable by the sandbox's user, as E2B's root is for its envd: so
// that `mkdir /x` and an upload to /0/file work. What user code writes there
// lands in this tmpfs only:
//   - it is a fresh instance in the sandbox's private mount namespace (no
//     other sandbox or host process sees it), gone with the namespace's last
//     process;
//   - it is bounded by size and nr_inodes (RootSize, half the memory limit
//     at most), and its pages are charged to the sandbox's memory cgroup;
//   - the entries bound into it (system directories, rootfs entries,
//     /etc/passwd…) are read-only mounts, and a mount point can be neither
//     removed nor renamed: only the root directory's own entries are
//     writable (merged-/usr symlinks such as /bin included: replacing one
//     changes only this sandbox's view);
//   - nosuid and nodev, like every writable mount of the sandbox.
//
// The owner is the sandbox's user (1000:100): its agent writes the files the
// SDK uploads.
//
// With a root user (rootuser.go) it is 1777, as /tmp: both the user and root
// create entries there, and only the owner of one may remove it.
func rootTmpfsData(size int64, rootUser bool) string {
	mode := "0755"
	if rootUser {
		mode = "1777"
	}
	return fmt.Sprintf("mode=%s,uid=%d,gid=%d,size=%d,nr_inodes=%d", mode, SandboxUID, SandboxGID, size, TmpfsInodes(size))
}
