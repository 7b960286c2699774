package records

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrNoHostUID: every host uid of a variant's range is held by a sandbox.
var ErrNoHostUID = errors.New("host uid allocation: every host uid of the range is held by a sandbox")

// UIDRange is a range of host uids (and gids: each sandbox's gid is its
// uid) that a variant hands out, one per sandbox, so that what one sandbox
// does as its user (files it leaves, processes, anything the kernel counts
// per uid) never counts for another sandbox or for a host user. Each
// variant has a range of its own (the local and docker variants keep their
// records in different runtime directories, so they could not see each
// other's allocations in a shared one).
type UIDRange struct {
	Base, Size int
}

// The variants' ranges: above what /etc/subuid hands out (100000 + 65536
// per user) and systemd's container range (524288…1879048191), below 2^31
// (tools that read uids as signed ints). LocalRootUIDs is not allocated: a
// local sandbox's root user takes the slot of its user's uid there. (The
// environment builder's steps use 0x60000000 and up, 65536 ids per build.)
var (
	LocalUIDs     = UIDRange{Base: 0x70000000, Size: 1 << 16}
	LocalRootUIDs = UIDRange{Base: 0x70010000, Size: 1 << 16}
	DockerUIDs    = UIDRange{Base: 0x70020000, Size: 1 << 16}
)

// uidFile is the allocation's record in a sandbox's directory.
const uidFile = "hostuid"

// forCaller is the part of r a caller of euid allocates from: root the
// lower half, anyone else the upper one. Only root can use the host-wide
// registry in /run (openRegistry); a caller that is not root coordinates
// with its own runtime directory (or a registry of its own), so without the
// split its sandboxes could be handed the uids of root's.
func (r UIDRange) forCaller(euid int) UIDRange {
	half := r.Size / 2
	if euid == 0 {
		return UIDRange{Base: r.Base, Size: half}
	}
	return UIDRange{Base: r.Base + half, Size: r.Size - half}
}

// Contains reports whether uid belongs to r.
func (r UIDRange) Contains(uid int) bool { return uid >= r.Base && uid < r.Base+r.Size }

// AllocHostUID picks the lowest uid of the caller's part of r (forCaller)
// that no sandbox directory of rt (nor, for root, of any other runtime
// directory: the registry) holds, and records it in dir (the new sandbox's directory, in rt). The
// record is a file in the sandbox's directory, written under a lock on rt:
// it survives restarts of the creating process, and it is freed when the
// directory goes (when the sandbox ends, or a sweep after a crash).
func AllocHostUID(rt, dir string, r UIDRange) (int, error) {
	r = r.forCaller(os.Geteuid())
	// The lock is the runtime directory itself (flock on its fd): no file
	// of ours lies around in it.
	lf, err := os.Open(rt)
	if err != nil {
		return 0, fmt.Errorf("host uid allocation: %w", err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return 0, fmt.Errorf("host uid allocation: %w", err)
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	used := map[int]bool{}
	ents, err := os.ReadDir(rt)
	if err != nil {
		return 0, fmt.Errorf("host uid allocation: %w", err)
	}
	// A directory's uid never changes while it exists (and names are never
	// reused: they hash random ids), so each is read once per process:
	// with a thousand sandboxes alive, reading every file on every Create
	// took tens of milliseconds. A directory without one yet is read again
	// next time (its creator waits for the lock we hold to write it).
	uidCache.Lock()
	defer uidCache.Unlock()
	key := fmt.Sprintf("%s\x00%d", rt, r.Base)
	known := uidCache.m[key]
	if known == nil {
		known = map[string]int{}
		uidCache.m[key] = known
	}
	present := make(map[string]bool, len(ents))
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		present[e.Name()] = true
		uid, ok := known[e.Name()]
		if !ok {
			if uid, ok = ReadHostUID(filepath.Join(rt, e.Name()), r); ok {
				known[e.Name()] = uid
			}
		}
		if ok {
			used[uid] = true
		}
	}
	for name := range known {
		if !present[name] {
			delete(known, name)
		}
	}
	reg, err := openRegistry()
	switch {
	case err == nil:
		defer reg.Close()
	case os.Geteuid() == 0:
		return 0, err
	default:
		// Not root (a docker caller): the registry is root's to make, so
		// this caller's runtime directory is all it can coordinate with,
		// as before the registry (SECURITY.md, the docker variant).
		reg = nil
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return 0, fmt.Errorf("host uid allocation: %w", err)
	}
	for uid := r.Base; uid < r.Base+r.Size; uid++ {
		if used[uid] {
			continue
		}
		if reg != nil {
			if claimed, err := claimHostUID(reg.Name(), uid, absDir, r); err != nil {
				return 0, err
			} else if !claimed {
				continue // another runtime directory's sandbox holds it
			}
		}
		if err := os.WriteFile(filepath.Join(dir, uidFile), []byte(strconv.Itoa(uid)), 0o600); err != nil {
			return 0, fmt.Errorf("host uid allocation: %w", err)
		}
		if filepath.Dir(dir) == filepath.Clean(rt) {
			known[filepath.Base(dir)] = uid
		}
		return uid, nil
	}
	return 0, fmt.Errorf("%w (%d uids from %d)", ErrNoHostUID, r.Size, r.Base)
}

// HostUIDRegistryEnv names the directory of host-wide claims on host uids
// (DefaultHostUIDRegistry when unset).
const HostUIDRegistryEnv = "CODE_SANDBOXES_HOST_UID_REGISTRY"

// DefaultHostUIDRegistry is where host uid claims live: /run is root's.
// Beside the runtime directories, never in one: root's local runtime
// directory is /run/code-sandboxes, whose every directory is taken for a
// sandbox's (a sweep removed the registry when it lived there).
// The local variant allocates host uids for root callers only; the docker
// variant for every caller, and one that is not root and finds no registry
// it can use coordinates with its own runtime directory only.
const DefaultHostUIDRegistry = "/run/code-sandboxes-host-uids"

// A runtime directory sees only its own sandboxes, and callers use many
// (one per user, per test, per serve): with the allocation by runtime
// directory alone, two sandboxes of two directories both got the range's
// first uid, and so shared what the kernel counts per user (one holding
// every inotify instance of its user left none for the other: CI saw
// serve's sandbox fail beside the hostile suite's). So every allocation
// also claims its uid in one host-wide registry: a symlink named for the
// uid, pointing at the sandbox's directory, made under a lock on the
// registry. A claim holds while that directory records that uid (a paused
// sandbox's too, whose processes are gone); once the directory is gone
// (the sandbox ended, or a sweep removed it) the next allocation may take
// the uid over.

// openRegistry opens (making it if needed) the registry directory and
// locks it; closing the file unlocks it.
func openRegistry() (*os.File, error) {
	path := os.Getenv(HostUIDRegistryEnv)
	if path == "" {
		path = DefaultHostUIDRegistry
	}
	fix := fmt.Sprintf("(root can make it; or set %s to a directory of this user's alone, mode 0700)", HostUIDRegistryEnv)
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("host uid allocation: the host-wide registry of host uids: %w %s", err, fix)
	}
	// Not through a symlink, and this user's alone: anyone who could write
	// in it could remove a live claim (two sandboxes would share a uid), and
	// anyone who could open it could hold its lock and stall every
	// allocation.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("host uid allocation: the host-wide registry of host uids %s: %w %s", path, err, fix)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("host uid allocation: the host-wide registry of host uids %s: %w", path, err)
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("host uid allocation: the host-wide registry of host uids %s is owned by uid %d with mode %#o: it must be uid %d's alone (chown %d %s; chmod 700 %s)",
			path, st.Uid, st.Mode&0o7777, os.Geteuid(), os.Geteuid(), path, path)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("host uid allocation: locking the registry %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// claimHostUID claims uid for the sandbox directory dir in the registry
// reg (locked by the caller). It reports false when a live claim of
// another directory holds it.
func claimHostUID(reg string, uid int, dir string, r UIDRange) (bool, error) {
	link := filepath.Join(reg, strconv.Itoa(uid))
	err := os.Symlink(dir, link)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return false, fmt.Errorf("host uid allocation: claiming %d: %w", uid, err)
	}
	if target, rerr := os.Readlink(link); rerr == nil && target != dir {
		if held, ok := ReadHostUID(target, r); ok && held == uid {
			return false, nil
		}
	}
	// A stale claim (its directory gone, or holding another uid now).
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("host uid allocation: releasing a stale claim on %d: %w", uid, err)
	}
	if err := os.Symlink(dir, link); err != nil {
		return false, fmt.Errorf("host uid allocation: claiming %d: %w", uid, err)
	}
	return true, nil
}

// uidCache holds the uids of the runtime directories' sandboxes, by runtime
// directory and range, then directory name.
var uidCache = struct {
	sync.Mutex
	m map[string]map[string]int
}{m: map[string]map[string]int{}}

// ReadHostUID returns the host uid recorded in a sandbox's directory, if
// it holds one of r. Only a regular file of this process's own user counts,
// read without following a symlink or waiting: a claim in the registry may
// point at a directory that is gone, whose path anyone may have made again
// since (a runtime directory under /tmp), with a FIFO, a link to /dev/zero
// or another user's file where the record was.
func ReadHostUID(dir string, r UIDRange) (int, bool) {
	fd, err := unix.Open(filepath.Join(dir, uidFile), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Size > maxUIDRecord {
		return 0, false
	}
	var b [maxUIDRecord + 1]byte
	n, err := unix.Read(fd, b[:])
	if err != nil || n > maxUIDRecord {
		return 0, false
	}
	uid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	return uid, err == nil && r.Contains(uid)
}

// maxUIDRecord bounds a hostuid file (a decimal uid).
const maxUIDRecord = 32
