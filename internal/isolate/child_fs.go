//go:build linux

// The sandbox's file system as the child builds it: the root directory and
// its binds, /dev, the /etc files and the masked parts of /proc.

package isolate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
)

// Host directories bind-mounted read-only into the sandbox. Nothing else of
// the host is visible: no /home, /root, /tmp, /var, /run, /srv, /opt, /mnt,
// /media, nor the caller's working directory.
var systemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"}

// rootfsReserved are the top-level names of a rootfs that are not taken from
// it: the sandbox contract's own mounts replace proc, dev, tmp, home and
// files; the sandbox gets no /sys (as with the host's directories); .etc is
// writeEtcFiles' scratch directory.
var rootfsReserved = map[string]bool{"proc": true, "dev": true, "sys": true, "tmp": true, "home": true, "files": true, ".etc": true}

// maxRootfsEntries bounds the number of top-level entries (each one a mount)
// a rootfs may have; a real one has about twenty.
const maxRootfsEntries = 256

// setupRoot builds the new root on a tmpfs and pivots into it.
//
// The new root is always a small tmpfs of our own holding the mount points,
// whether its content comes from the host's system directories or from
// Spec.Rootfs. For a rootfs, every top-level entry (but the reserved ones) is
// bound read-only onto the tmpfs instead of binding the rootfs itself as the
// root: then the mount points /proc, /dev, /tmp, /home/user and /files need
// not exist in the rootfs (debootstrap and OCI images lack /files and
// /home/user) and nothing is ever created in it, and no mount lands on a path
// inside the rootfs, where a symlink planted in an image could redirect it.
func setupRoot(cfg *childConfig) error {
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// Any existing directory serves as mount point for the new root; the
	// host's /tmp is hidden by it only inside our mount namespace. The
	// rootfs, even when it lives under /tmp, stays reachable: we hold an fd.
	const nr = "/tmp"
	if err := mount("tmpfs", nr, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, rootTmpfsData(cfg.RootSize, cfg.RootUser)); err != nil {
		return err
	}
	// The rootfs's /home/user, opened before bindRootfs closes the rootfs:
	// the sandbox's home starts as a copy of it (package homeseed).
	homeSrc := -1
	if cfg.RootfsFD > 0 {
		var err error
		if homeSrc, err = homeseed.OpenRootfsHome(cfg.RootfsFD); err != nil {
			return err
		}
		if err := bindRootfs(nr, cfg); err != nil {
			if homeSrc >= 0 {
				unix.Close(homeSrc)
			}
			return err
		}
	} else {
		if err := bindHostDirs(nr); err != nil {
			return err
		}
	}
	if cfg.RootUser {
		if err := prepareRootUser(nr, cfg); err != nil {
			return err
		}
	}

	// /proc: a fresh instance for our pid namespace.
	if err := os.Mkdir(nr+"/proc", 0o555); err != nil {
		return err
	}
	if err := mount("proc", nr+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := setupDev(nr + "/dev"); err != nil {
		return err
	}
	for _, m := range []struct {
		path string
		mode string
		size int64
		user bool
	}{
		{"/tmp", "1777", cfg.TmpSize, false},
		{"/home/user", "0755", cfg.HomeSize, true},
		{"/files", "0755", cfg.FilesSize, true},
	} {
		dst := nr + m.path
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		data := fmt.Sprintf("mode=%s,size=%d,nr_inodes=%d", m.mode, m.size, TmpfsInodes(m.size))
		if m.user {
			data += fmt.Sprintf(",uid=%d,gid=%d", SandboxUID, SandboxGID)
		}
		if err := mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
			if homeSrc >= 0 {
				unix.Close(homeSrc)
			}
			return err
		}
		if m.path == "/home/user" && homeSrc >= 0 {
			// Closed by Copy: no fd outside the new root may outlive the
			// setup.
			err := homeseed.Copy(homeSrc, dst, homeseed.Limits{Bytes: m.size, Inodes: TmpfsInodes(m.size),
				Hint: HomeHint})
			homeSrc = -1
			if err != nil {
				return err
			}
		}
	}
	if err := bindVolumes(nr, cfg); err != nil {
		return err
	}
	// /var/tmp: programs expect it; it is the same size-limited /tmp. Without
	// a /var of the rootfs it is a symlink on our tmpfs; a rootfs's own
	// /var/tmp gets /tmp bound over it below.
	if _, err := os.Lstat(nr + "/var"); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(nr+"/var", 0o755); err != nil {
			return err
		}
		if err := os.Symlink("/tmp", nr+"/var/tmp"); err != nil {
			return err
		}
	}

	// pivot_root(".", ".") stacks the old root on top of the new one;
	// detaching it leaves only the new root (the runc idiom, which needs no
	// directory for the old root).
	if err := unix.Chdir(nr); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := writeEtcFiles(cfg); err != nil {
		return err
	}
	// Only a real directory (Lstat): a symlink there would make the bind land
	// elsewhere (harmlessly, we are inside the new root by now, but wrongly).
	if fi, err := os.Lstat("/var/tmp"); err == nil && fi.IsDir() {
		if err := mount("/tmp", "/var/tmp", "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	if err := maskProc(); err != nil {
		return err
	}
	// The root itself (the tmpfs with the mount points) stays writable:
	// see rootTmpfsData.
	return nil
}

// bindHostDirs fills the new root with the host's systemDirs.
func bindHostDirs(nr string) error {
	rootfd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /: %w", err)
	}
	defer unix.Close(rootfd)
	for _, d := range systemDirs {
		if err := bindEntry(rootfd, d, filepath.Join(nr, d)); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("/%s: %w", d, err)
		}
	}
	return nil
}

// bindRootfs fills the new root with the top-level entries of the rootfs
// whose directory Start opened for us (cfg.RootfsFD), read-only.
func bindRootfs(nr string, cfg *childConfig) error {
	// An fd of a directory outside the new root would let whoever holds it
	// walk out (openat(fd, "..")): closed as soon as the binds exist (and
	// received close-on-exec, in case of an early return).
	defer unix.Close(cfg.RootfsFD)
	dfd, err := unix.Openat(cfg.RootfsFD, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("rootfs %s: %w", cfg.Rootfs, err)
	}
	d := os.NewFile(uintptr(dfd), cfg.Rootfs)
	names, err := d.Readdirnames(maxRootfsEntries + 1)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("rootfs %s: list: %w", cfg.Rootfs, err)
	}
	if len(names) > maxRootfsEntries {
		return fmt.Errorf("rootfs %s: more than %d entries at the top", cfg.Rootfs, maxRootfsEntries)
	}
	sort.Strings(names)
	for _, name := range names {
		if rootfsReserved[name] || name == RootDir[1:] || (cfg.RootUser && name == RootHome[1:]) {
			continue
		}
		if err := bindEntry(cfg.RootfsFD, name, filepath.Join(nr, name)); err != nil {
			return fmt.Errorf("rootfs %s: /%s: %w", cfg.Rootfs, name, err)
		}
	}
	return nil
}

// bindEntry recreates the entry name of the directory dirfd at dst (on the
// new root's tmpfs): a directory or a regular file as a read-only recursive
// bind, a symlink as the same symlink (merged /usr: /bin -> usr/bin resolves
// inside the new root; a link pointing elsewhere simply dangles). Anything
// else (device nodes, fifos, sockets) is left out.
func bindEntry(dirfd int, name, dst string) error {
	// O_PATH|O_NOFOLLOW opens the entry itself, never what a symlink points
	// at; the bind below takes this fd as its source, so it binds exactly
	// what was checked here whatever happens to the path meanwhile.
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, name)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case unix.S_IFDIR:
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	case unix.S_IFREG:
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	default:
		return nil
	}
	if err := mount("/proc/self/fd/"+strconv.Itoa(fd), dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return remountTreeReadOnly(dst)
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", errors.New("symlink target too long")
	}
	return string(buf[:n]), nil
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", src, dst, fstype, err)
	}
	return nil
}

// remountTreeReadOnly makes dst and every mount below it read-only, nosuid
// and nodev. A bind remount inside a user namespace must keep the flags the
// host locked on the source mount (noexec, nodev, atime...), hence statfs.
func remountTreeReadOnly(dst string) error {
	for _, mp := range mountsUnder(dst) {
		var st unix.Statfs_t
		if err := unix.Statfs(mp, &st); err != nil {
			return fmt.Errorf("statfs %s: %w", mp, err)
		}
		keep := uintptr(st.Flags) & (unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
		flags := unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | keep
		if err := mount("", mp, "", flags, ""); err != nil {
			return err
		}
	}
	return nil
}

// mountsUnder lists dst and the mount points below it, parents first.
func mountsUnder(dst string) []string {
	out := []string{dst}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if strings.HasPrefix(mp, dst+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// setupDev creates a minimal /dev. Device nodes cannot be created in a user
// namespace, so the harmless ones are bind mounts of the host's.
func setupDev(dev string) error {
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	if err := mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, fmt.Sprintf("mode=0755,size=64k,nr_inodes=%d", DevInodes)); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p := filepath.Join(dev, n)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := mount("/dev/"+n, p, "", unix.MS_BIND, ""); err != nil {
			if n == "tty" {
				os.Remove(p) // no controlling-tty device on this host: fine
				continue
			}
			return err
		}
	}
	// A private devpts instance; gid=5 (tty) is not mapped, so no gid option.
	if err := os.Mkdir(dev+"/pts", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err == nil {
		if err := os.Symlink("pts/ptmx", dev+"/ptmx"); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dev+"/shm", 0o1777); err != nil {
		return err
	}
	if err := mount("tmpfs", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("mode=1777,size=64m,nr_inodes=%d", TmpfsInodes(64<<20))); err != nil {
		return err
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// writeEtcFiles overlays /etc/passwd, group, hostname and hosts (read-only
// binds) so that the sandbox user is "user" (1000) in group "users" (100)
// whatever the host's files say, and the hostname resolves.
func writeEtcFiles(cfg *childConfig) error {
	const scratch = "/.etc"
	if err := os.Mkdir(scratch, 0o755); err != nil {
		return err
	}
	if err := mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return err
	}
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			"user:x:1000:100:user:/home/user:/bin/bash\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group":    "root:x:0:\nusers:x:100:user\nnogroup:x:65534:\n",
		"hostname": cfg.Hostname + "\n",
		"hosts":    "127.0.0.1\tlocalhost " + cfg.Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
	if cfg.RootUser {
		// Root exists here (rootuser.go): a shell for sudo -i, and its name
		// for its ids as the sandbox's own namespace (the agent) sees them.
		files["passwd"] = strings.Replace(files["passwd"], "root:x:0:0:root:/root:/usr/sbin/nologin", "root:x:0:0:root:/root:/bin/bash", 1) +
			fmt.Sprintf("root:x:%d:%d:root:/root:/bin/bash\n", RootOuterUID, RootOuterGID)
		files["group"] += fmt.Sprintf("root:x:%d:\n", RootOuterGID)
	}
	if cfg.Network == NetworkTUN {
		// The user-space stack behind tun0 answers DNS on its gateway.
		files["resolv.conf"] = "nameserver " + TUNGatewayIPv4 + "\nnameserver " + TUNGatewayIPv6 + "\n"
	}
	for name, content := range files {
		dst := "/etc/" + name
		if _, err := os.Stat(dst); err != nil {
			continue // bind needs an existing file; /etc is read-only
		}
		src := scratch + "/" + name
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			return err
		}
		if err := mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		if err := mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
	// The binds keep the files alive; the scratch mount point goes away.
	if err := unix.Unmount(scratch, unix.MNT_DETACH); err != nil {
		return err
	}
	return os.Remove(scratch)
}

// maskProc hides and write-protects the same /proc paths as Docker's default
// (moby oci/defaults.go: MaskedPaths, ReadonlyPaths).
func maskProc() error {
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/acpi", "/proc/asound", "/proc/scsi"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			err = mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k")
		} else {
			err = mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return err
		}
	}
	for _, p := range []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		if err := mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
	return nil
}
