//go:build linux

package e2bserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A volume is an ext4 file system in a sparse image file, loop-mounted
// (nosuid, nodev) at its mnt directory. Why this: its size is the image's,
// fixed at create, so a sandbox (or an API upload) that fills it gets
// ENOSPC and the host's disk holds at most that; the image is sparse, so
// an empty volume costs next to nothing; it needs only what Debian's base
// system has (mount, mkfs.ext4 from e2fsprogs, the loop driver) and works
// on any host file system (project quotas would need the host's to be XFS
// or ext4 mounted with prjquota). Sandboxes see the mounted file system
// only, never the image, so they can't corrupt its metadata.
//
// Each sandbox's user is a host uid of its own, so the volume's root
// carries a default ACL that gives everyone read and write: files one
// sandbox of the team writes, the team's other sandboxes can change
// (the volume is reachable only by the team's sandboxes and serve).

// volumeSupport says why this server can't keep volumes, or nil.
func volumeSupport() error {
	if os.Geteuid() != 0 {
		return errors.New("volumes need serve to run as root (each is a loop-mounted file system of a fixed size)")
	}
	for _, b := range []string{"mkfs.ext4", "mount", "losetup"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("volumes need %s on this host (Debian: apt-get install e2fsprogs mount): %w", b, err)
		}
	}
	return nil
}

// makeVolumeFS makes the image (size bytes, sparse), its file system and
// mounts it at mnt, its root open to the team's sandboxes.
func makeVolumeFS(ctx context.Context, image, mnt string, size int64) error {
	f, err := os.OpenFile(image, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// -m 0: no blocks reserved for root (the sandboxes aren't root there);
	// lazy init keeps a large empty image sparse and fast to make.
	out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", image).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, bytes.TrimSpace(out))
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return err
	}
	if err := mountVolume(image, mnt); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(mnt, "lost+found"))
	if err := os.Chmod(mnt, 0o777); err != nil {
		return err
	}
	return unix.Setxattr(mnt, "system.posix_acl_default", openACL(), 0)
}

// openACL is a POSIX ACL (the kernel's xattr form: version 2, then
// tag/perm/id entries) of rwx for the owner, the group and others.
func openACL() []byte {
	const (
		userObj  = 0x01
		groupObj = 0x04
		other    = 0x20
		undef    = 0xffffffff
	)
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, tag := range []uint16{userObj, groupObj, other} {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint16(b, 7)
		b = binary.LittleEndian.AppendUint32(b, undef)
	}
	return b
}

// mountVolume mounts image at mnt unless it is mounted there already (a
// restart of serve finds its volumes mounted, or mounts them on first use).
func mountVolume(image, mnt string) error {
	if mounted(mnt) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The image still on a loop device (a lazy unmount that a sandbox
	// holds): a second mount of the same ext4 would corrupt it.
	// The kernel lets go of a loop device a moment after its last user
	// (asynchronously): wait a little for that, no longer.
	for i := 0; ; i++ {
		out, err := exec.CommandContext(ctx, "losetup", "-j", image).Output()
		if err == nil && len(bytes.TrimSpace(out)) == 0 {
			break
		}
		if i == 50 {
			return fmt.Errorf("the volume's file system is still attached (%s %v): a sandbox that used it before may still run; kill it, then retry", bytes.TrimSpace(out), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", image, mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount the volume: %w: %s", err, bytes.TrimSpace(out))
	}
	if !mounted(mnt) {
		return fmt.Errorf("mount the volume at %s: not mounted after mount(8) succeeded", mnt)
	}
	return nil
}

// mounted reports whether dir is a mount point (another device than its
// parent's).
func mounted(dir string) bool {
	var a, b unix.Stat_t
	if unix.Lstat(dir, &a) != nil || unix.Lstat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// unmountVolume unmounts mnt (lazily: a sandbox that still has it open
// keeps its view until it ends; destroy refuses volumes in use first).
func unmountVolume(mnt string) error {
	if !mounted(mnt) {
		return nil
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s: %w", mnt, err)
	}
	return nil
}

func statTimes(st *syscall.Stat_t) (atime, ctime string) {
	return time.Unix(st.Atim.Unix()).UTC().Format(time.RFC3339Nano), time.Unix(st.Ctim.Unix()).UTC().Format(time.RFC3339Nano)
}
