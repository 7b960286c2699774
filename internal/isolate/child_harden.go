//go:build linux

// The child's own process: loopback, inherited fds, rlimits, securebits,
// capabilities and privileges, on one thread or in place on every thread.

package isolate

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cloexecFrom sets close-on-exec on every fd from first up.
func cloexecFrom(first int) error {
	err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return err
	}
	// Before Linux 5.11: one by one.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// setRlimits applies the sandbox's rlimits (soft = hard, so they cannot be
// raised again without CAP_SYS_RESOURCE, which is about to go):
//   - RLIMIT_NOFILE 4096 (or the inherited hard limit if lower);
//   - RLIMIT_CORE 0: no core dumps filling the small tmpfs mounts;
//   - RLIMIT_FSIZE: the largest tmpfs size (no file can be bigger anyway).
//
// RLIMIT_NPROC is deliberately not set: it counts processes per host uid,
// which for unprivileged callers includes all of the caller's own processes.
// The pids cgroup limit is the right tool.
func setRlimits(cfg *childConfig) error {
	set := func(res int, v uint64) error {
		var cur unix.Rlimit
		if err := unix.Getrlimit(res, &cur); err == nil && cur.Max != unix.RLIM_INFINITY && cur.Max < v {
			v = cur.Max
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", res, err)
		}
		return nil
	}
	if err := set(unix.RLIMIT_NOFILE, cfg.NoFile); err != nil {
		return err
	}
	if err := set(unix.RLIMIT_CORE, 0); err != nil {
		return err
	}
	return set(unix.RLIMIT_FSIZE, uint64(cfg.FSize))
}

// Securebits (linux/securebits.h).
const (
	secbitNoroot                  = 1 << 0
	secbitNorootLocked            = 1 << 1
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// threadSys makes one per-thread change: on the calling thread only
// (thisThread: stage 1 and the broker's stage 3 then re-execute, and every
// thread of the new image is a copy of this one) or on every thread of the
// process (allThreads: hardened in place; it fails with ENOTSUP where the
// runtime can't, with cgo).
type threadSys func(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err syscall.Errno)

var (
	thisThread threadSys = syscall.RawSyscall6
	allThreads threadSys = syscall.AllThreadsSyscall6
)

// inPlaceByDefault: hardening in place is not the default. It saves the
// re-exec (a Go start of the binary: ~2 ms of CPU and ~950 page faults per
// sandbox with the broker's) but costs ~45 rounds of AllThreadsSyscall,
// each a stop of the world and a signal every thread must wake for: the
// bounding set alone is 41 (one prctl per capability, on every thread).
// That is ~60 us a round on an idle 2-core host and far more on a busy
// one, where each round waits for every thread to be scheduled; measured
// on a busy 2-core host it was no faster (bench -ab, same binary, B with
// ReexecEnv=1: B-A -2.8 ms per pair, B faster). Flip it where a
// measurement says otherwise.
const inPlaceByDefault = false

// wantInPlace reports whether to try hardening in place (ReexecEnv).
func wantInPlace() bool {
	switch os.Getenv(ReexecEnv) {
	case "":
		return inPlaceByDefault
	case "0":
		return true
	}
	return false
}

// joinCgroupNSAllThreads makes every thread join the calling thread's
// cgroup namespace (just unshared): setns on each, which for the caller
// itself is a no-op. It reports false, changing nothing, where the process
// can't change all its threads (then only a re-exec gives them all the
// namespace).
func joinCgroupNSAllThreads() (bool, error) {
	fd, err := unix.Open("/proc/thread-self/ns/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("cgroup namespace: %w", err)
	}
	defer unix.Close(fd)
	_, _, errno := allThreads(unix.SYS_SETNS, uintptr(fd), unix.CLONE_NEWCGROUP, 0, 0, 0, 0)
	switch errno {
	case 0:
		return true, nil
	case syscall.ENOTSUP:
		return false, nil
	}
	return false, fmt.Errorf("cgroup namespace: setns on every thread: %w", errno)
}

// dropPrivileges empties every capability set (dropCapabilities), then
// sets no_new_privs: no setuid/file-capability gains on exec ever again;
// it is also what allows an unprivileged seccomp filter.
func dropPrivileges(sys threadSys, keepSetpcap bool) error {
	if err := dropCapabilities(sys, keepSetpcap); err != nil {
		return err
	}
	if _, _, errno := sys(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("no_new_privs: %w", errno)
	}
	return nil
}

// dropCapabilities empties every capability set of the threads sys
// changes: bounding, ambient, inheritable, permitted, effective. With the
// bounding and inheritable sets empty no exec (file caps, setuid) can bring
// any back; the locked securebits additionally make "uid 0 inside" mean
// nothing. keepSetpcap leaves CAP_SETPCAP in the permitted and effective
// sets (only there), for changes still to come.
func dropCapabilities(sys threadSys, keepSetpcap bool) error {
	if _, _, errno := sys(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS,
		secbitNoroot|secbitNorootLocked|secbitKeepCapsLocked|secbitNoCapAmbientRaise|secbitNoCapAmbientRaiseLocked, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("securebits: %w", errno)
	}
	for c := 0; c <= LastCap(); c++ {
		if _, _, errno := sys(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0, 0); errno != 0 && errno != syscall.EINVAL {
			return fmt.Errorf("drop bounding cap %d: %w", c, errno)
		}
	}
	if _, _, errno := sys(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("clear ambient caps: %w", errno)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if keepSetpcap {
		data[0].Permitted = 1 << unix.CAP_SETPCAP
		data[0].Effective = 1 << unix.CAP_SETPCAP
	}
	_, _, errno := sys(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0, 0, 0, 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if errno != 0 {
		return fmt.Errorf("capset: %w", errno)
	}
	return nil
}

// closeInherited closes every fd from first up that lacks close-on-exec:
// those came from whatever started the process (what it opened itself
// since, the Go runtime's included, is close-on-exec).
func closeInherited(first int) error {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < first {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
	return nil
}
