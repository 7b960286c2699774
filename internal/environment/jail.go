//go:build linux

package environment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/egress"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
)

// Every command a build runs inside the rootfs (apt-get, pip, a template's
// run steps) runs in a jail that never holds host root:
//
//   - a user namespace mapping ids 0…65535 inside (dpkg chowns to any of
//     them; apt drops to _apt) onto a host range of 65536 ids of the build's
//     own (see allocSlot), so root in a step is an unprivileged host uid
//     with capabilities only over the step's own namespaces;
//   - the rootfs seen through an idmapped mount (on-disk id k is host id
//     range+k there), so the step owns its files as root of the image
//     without a chown of the tree, and what it writes lands on disk with the
//     image's own ids;
//   - bubblewrap for the rest: new mount, pid, ipc, uts and cgroup
//     namespaces, pivot_root into the rootfs with the host's tree detached
//     (no chroot to escape from), a fresh /proc, a /dev of its own with only
//     null, zero, full, random, urandom and tty, the capability bounding set
//     cut to what apt, dpkg and pip need, and every process of the step
//     killed when it ends (the pid namespace dies with its init);
//   - a network namespace with only loopback and the tun0 of internal/egress:
//     the step reaches the internet (apt and pip download), never the host's
//     loopback, the host's own addresses, link-local (cloud metadata) or the
//     private ranges. The only exception is a host loopback port the store
//     is told to forward (Store.LoopbackPorts: a package index on the build
//     machine, as tests use); none by default.
type jail struct {
	hostID int      // first host id of the range
	slot   *os.File // flock held on the range while the build runs

	holder   *exec.Cmd // keeps the user and network namespaces alive
	holderIn io.Closer
	userns   *os.File

	mnt   string // the idmapped view of the rootfs
	stack *egress.Stack

	mu   sync.Mutex
	lns  []net.Listener
	done chan struct{}
}

// idRangeDir is where the ranges' locks live: one place for the machine
// (/run/code-sandboxes-build-ids, root's; not the local variant's runtime
// dir, whose sweep owns its entries), so that builds of two stores never
// share a range; the store's tmp/ only where /run is missing.
func idRangeDir(storeDir string) string {
	if fi, err := os.Stat("/run"); err == nil && fi.IsDir() {
		return "/run/code-sandboxes-build-ids"
	}
	return filepath.Join(storeDir, "tmp", "idranges")
}

// allocSlot takes the first free range and returns its first host id and
// its slot number: a range is held by a flock on its file under dir, which
// the kernel releases when the build's process ends however it ends, so a
// crash never leaks a range.
func allocSlot(dir string) (int, int, *os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, 0, nil, err
	}
	for i := 0; i < idRangeSlots; i++ {
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(i)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return 0, 0, nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			return idRangeBase + i*idRangeSize, i, f, nil
		}
		f.Close()
	}
	return 0, 0, nil, fmt.Errorf("all %d host id ranges for builds are in use: too many builds at once", idRangeSlots)
}

// checkBuildSupport: builds run here (jail_other.go refuses elsewhere).
func checkBuildSupport() error { return nil }

// mntDetach is what removeTree unmounts a leaked mount with.
const mntDetach = unix.MNT_DETACH

// newJail sets up the namespaces and the idmapped rootfs for a build.
func newJail(storeDir, work, rootfs string, loopback []int, logw io.Writer) (j *jail, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("build steps (apt, pip, run) need root: the jail maps a range of 65536 host ids and mounts the rootfs idmapped; build as root (sudo), or build on a machine where you are")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		return nil, errors.New("build steps run under bubblewrap, which is not installed: apt-get install bubblewrap (make deps)")
	}
	for _, tool := range []string{"nsenter", "prlimit", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("build steps need %s (util-linux): apt-get install util-linux", tool)
		}
	}
	jl := &jail{done: make(chan struct{})}
	defer func() {
		if err != nil {
			jl.close() // not j: a failing return has set it to nil
		}
	}()
	j = jl
	var slot int
	if j.hostID, slot, j.slot, err = allocSlot(idRangeDir(storeDir)); err != nil {
		return nil, err
	}
	// The holder: a process that makes a new user namespace and a new
	// network namespace and then waits for its stdin to close (which also
	// happens if we die). It runs as host uid hostID, so that uid owns the
	// user namespace: bubblewrap, run as that same uid with no host
	// capability, may then join it. We (root) write its id maps: a root
	// writer may map the whole range, the holder itself could map one id.
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, errors.New("build steps need unshare (util-linux): apt-get install util-linux")
	}
	j.holder = exec.Command(unshare, "--user", "--net", "--", "cat")
	j.holder.Dir = "/"
	j.holder.Env = []string{"PATH=/usr/bin:/bin"}
	in, err := j.holder.StdinPipe()
	if err != nil {
		return nil, err
	}
	j.holderIn = in
	j.holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(j.hostID), Gid: uint32(j.hostID)}}
	if err := j.holder.Start(); err != nil {
		j.holder = nil
		return nil, fmt.Errorf("build jail: user namespace: %w", err)
	}
	if err := j.mapIDs(); err != nil {
		return nil, fmt.Errorf("build jail: user namespace: %w", err)
	}
	if j.userns, err = os.Open(fmt.Sprintf("/proc/%d/ns/user", j.holder.Process.Pid)); err != nil {
		return nil, err
	}
	// No user namespace below the jail's: a step gets no fresh set of
	// capabilities to reach more of the kernel with (the limit is the
	// namespace's own sysctl, which only its root, here us, may set).
	noNest := exec.Command("nsenter", "--user=/proc/"+strconv.Itoa(j.holder.Process.Pid)+"/ns/user", "--setuid", "0", "--setgid", "0", "--",
		"sh", "-c", "echo 0 > /proc/sys/user/max_user_namespaces")
	noNest.Env = []string{"PATH=/usr/bin:/bin"}
	if out, err := noNest.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build jail: user.max_user_namespaces: %w: %s", err, out)
	}
	// The rootfs through an idmapped mount, attached (private) under the
	// store's tmp: bwrap, which runs as the range's first id, must be able
	// to walk there (a build's work dir is root's alone). The directory is
	// the slot's: whatever a build that died left mounted there is ours to
	// detach now that we hold the slot.
	j.mnt = filepath.Join(storeDir, "tmp", "jail-"+strconv.Itoa(slot))
	for range 8 {
		if unix.Unmount(j.mnt, unix.MNT_DETACH) != nil {
			break
		}
	}
	if err := os.Remove(j.mnt); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("build jail: stale %s: %w", j.mnt, err)
	}
	if err := os.Mkdir(j.mnt, 0o711); err != nil {
		return nil, err
	}
	if err := os.Chmod(j.mnt, 0o711); err != nil {
		return nil, err
	}
	if err := walkable(filepath.Dir(j.mnt)); err != nil {
		return nil, err
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, rootfs, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("build jail: open_tree %s: %w", rootfs, err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(j.userns.Fd()), Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return nil, fmt.Errorf("build jail: idmapped mount of the rootfs (needs Linux ≥ 5.12 and a filesystem that supports it, such as ext4, xfs or btrfs): %w", err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, j.mnt, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return nil, fmt.Errorf("build jail: attach the rootfs: %w", err)
	}
	// The network: egress's stack on a tun0 in the holder's namespace.
	tun, err := isolate.AttachTUN(j.holder.Process.Pid)
	if err != nil {
		return nil, fmt.Errorf("build jail: network: %w", err)
	}
	logger := log.New(&egress.CappedWriter{W: logw, Left: 1 << 20}, "build network: ", 0)
	if j.stack, err = egress.Start(tun, stepsPolicy, egress.Options{Logf: logger.Printf}); err != nil {
		return nil, fmt.Errorf("build jail: network: %w", err)
	}
	if err := j.loopbackUp(); err != nil {
		return nil, fmt.Errorf("build jail: loopback: %w", err)
	}
	for _, port := range loopback {
		if err := j.forward(port); err != nil {
			return nil, fmt.Errorf("build jail: loopback port %d: %w", port, err)
		}
	}
	return j, nil
}

// mapIDs waits (bounded) until the holder is in its own user namespace,
// then maps ids 0…65535 there onto the range.
func (j *jail) mapIDs() error {
	self, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		return err
	}
	pid := j.holder.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
		if err != nil {
			return err
		}
		if ns != self {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the namespace holder did not unshare within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	m := fmt.Sprintf("0 %d %d\n", j.hostID, idRangeSize)
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, f), []byte(m), 0); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	return nil
}

// walkable checks that every directory from / to dir lets others through
// (o+x), as bwrap needs to reach the jail's mount.
func walkable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("build jail: %s is not searchable by other users (mode %v), and build steps run as an unprivileged uid that must reach %s: chmod o+x it, or put the environment store elsewhere", d, fi.Mode().Perm(), dir)
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// inNetns runs fn on a thread that joined the jail's network namespace
// (root may join any); sockets fn opens stay in that namespace.
func (j *jail) inNetns(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer self.Close()
		target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", j.holder.Process.Pid))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		err = fn()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread() // else the runtime discards the thread
		}
		ch <- err
	}()
	return <-ch
}

// loopbackUp brings the jail's lo up: a step may serve and test things on
// its own loopback (which is not the host's).
func (j *jail) loopbackUp() error {
	return j.inNetns(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
}

// maxForwardConns bounds the connections of one forwarded port.
const maxForwardConns = 64

// forward makes 127.0.0.1:port inside the jail's network namespace reach
// 127.0.0.1:port of the host: a listener created from a thread that joined
// the namespace, whose connections we dial out from the host's.
func (j *jail) forward(port int) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("not a port")
	}
	var ln net.Listener
	err := j.inNetns(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		return err
	})
	r := struct {
		ln  net.Listener
		err error
	}{ln, err}
	if r.err != nil {
		return r.err
	}
	j.mu.Lock()
	j.lns = append(j.lns, r.ln)
	j.mu.Unlock()
	slots := make(chan struct{}, maxForwardConns)
	go func() {
		for {
			c, err := r.ln.Accept()
			if err != nil {
				return
			}
			select {
			case slots <- struct{}{}:
			default:
				c.Close()
				continue
			}
			go func() {
				defer func() { <-slots }()
				defer c.Close()
				up, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
				if err != nil {
					return
				}
				defer up.Close()
				finished := make(chan struct{})
				defer close(finished)
				go func() {
					select {
					case <-j.done:
						c.Close()
						up.Close()
					case <-finished:
					}
				}()
				go func() { _, _ = io.Copy(up, c); _ = up.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return nil
}

// stepProcs bounds the processes (and threads) of one id in a step.
const stepProcs = 4096

// keptCapNames are the capabilities a step running as root keeps, in its
// own user namespace only: what apt, dpkg and pip need to install as root.
// CAP_SYS_ADMIN (mounts), CAP_SYS_CHROOT, CAP_NET_ADMIN (tun0's routes),
// CAP_NET_RAW, CAP_MKNOD, CAP_SYS_PTRACE and the rest are gone.
var keptCapNames = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE", "CAP_AUDIT_WRITE", "CAP_SETFCAP"}

// command is the argv that runs argv in the jail as uid:gid in workdir.
func (j *jail) command(uid, gid int, workdir string, env, argv []string) []string {
	// nsenter joins the network namespace as root, then becomes the range's
	// first host id (no capability left in the host's namespaces), which
	// owns the user namespace bwrap joins.
	// prlimit first: RLIMIT_NPROC counts per real uid, and every id of the
	// step is one of our range on the host, so a fork bomb stops at
	// stepProcs processes of one id instead of filling the host's pid table.
	args := []string{"prlimit", "--nproc=" + strconv.Itoa(stepProcs), "--",
		"nsenter", "--net=/proc/" + strconv.Itoa(j.holder.Process.Pid) + "/ns/net",
		"--setuid", strconv.Itoa(j.hostID), "--setgid", strconv.Itoa(j.hostID), "--",
		"bwrap", "--userns", "3", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--hostname", "build", "--info-fd", "4",
		"--bind", j.mnt, "/", "--proc", "/proc", "--dev", "/dev", "--cap-drop", "ALL"}
	if uid == 0 {
		for _, c := range keptCapNames {
			args = append(args, "--cap-add", c)
		}
	} else {
		// bwrap (0.8) can't switch to a user in a namespace it joined
		// (it sets the uid before the gid), so the image's own setpriv
		// does: root with only CAP_SETUID and CAP_SETGID execs it, and
		// the switch to a non-zero uid clears every capability.
		args = append(args, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID")
		argv = append([]string{"setpriv", "--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(gid),
			"--groups", strconv.Itoa(gid), "--"}, argv...)
	}
	args = append(args, "--uid", "0", "--gid", "0", "--chdir", workdir, "--clearenv")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	return append(append(args, "--"), argv...)
}

// run runs argv in the jail with its output in the build log. When the
// step's command ends, whatever it left running ends too: bwrap's init (pid
// 1 of the step's pid namespace) waits for every orphan, so we kill it,
// which makes the kernel kill the whole namespace, and wait (bounded) for
// it to be gone.
func (j *jail) run(ctx context.Context, b *builder, uid, gid int, workdir string, env, argv []string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	initPid := make(chan int, 1)
	go func() {
		var info struct {
			ChildPid int `json:"child-pid"`
		}
		// bwrap writes one JSON object; the decoder needs no EOF.
		_ = json.NewDecoder(io.LimitReader(r, 4096)).Decode(&info)
		initPid <- info.ChildPid
	}()
	runErr := b.commandFiles(ctx, j.command(uid, gid, workdir, env, argv), nil, []*os.File{j.userns, w})
	w.Close()
	r.Close()
	pid := <-initPid
	if err := j.killInit(pid); err != nil {
		return errors.Join(runErr, fmt.Errorf("build jail: ending the step's processes: %w", err))
	}
	return runErr
}

// killInit kills the step's pid namespace by its init (a host pid, checked
// to run as an id of our range so a reused pid is never hit) and waits up
// to 10 s for it to be gone.
func (j *jail) killInit(pid int) error {
	if pid <= 0 {
		return nil // bwrap failed before it made the namespace
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil // already gone
	}
	defer unix.Close(fd)
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	ours := false
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Uid:" {
			u, _ := strconv.Atoi(f[1])
			ours = u >= j.hostID && u < j.hostID+idRangeSize
		}
	}
	if !ours {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := unix.Poll(fds, 100)
		if n > 0 {
			return nil
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
	}
	return fmt.Errorf("the step's init (pid %d) did not end within 10s", pid)
}

// close ends the holder (and with it the namespaces), detaches the
// idmapped mount and frees the range.
func (j *jail) close() {
	if j == nil {
		return
	}
	select {
	case <-j.done:
		return
	default:
		close(j.done)
	}
	if j.stack != nil {
		j.stack.Close()
	}
	j.mu.Lock()
	for _, ln := range j.lns {
		ln.Close()
	}
	j.mu.Unlock()
	if j.mnt != "" {
		_ = unix.Unmount(j.mnt, unix.MNT_DETACH)
		_ = os.Remove(j.mnt)
	}
	if j.userns != nil {
		j.userns.Close()
	}
	if j.holder != nil {
		j.holderIn.Close()
		_ = j.holder.Process.Kill()
		_ = j.holder.Wait()
	}
	if j.slot != nil {
		j.slot.Close() // releases the flock
	}
}
