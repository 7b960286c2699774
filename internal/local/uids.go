package local

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

// As root, every sandbox's user maps to a host uid (and gid) of its own, so
// that what one sandbox does as its user (files it leaves, processes,
// anything the kernel counts per uid) never counts for another sandbox or
// for a host user. The ids come from a range of our own:
//
//	uidBase … uidBase+uidSlots-1 = 0x70000000 … 0x7000ffff
//
// above the ranges /etc/subuid hands out (100000 + 65536 per user) and
// systemd's container range (524288…1879048191), below 2^31 (tools that
// read uids as signed ints). The allocation is recorded as a file (hostuid)
// in the sandbox's directory of the runtime dir, under a lock on the
// runtime dir: it survives
// restarts of the creating process, and it is freed when the directory goes
// (the supervisor removes it when the sandbox ends; Sweep after a crash).
const (
	uidBase  = 0x70000000
	uidSlots = 1 << 16
	uidFile  = "hostuid"
)

// allocHostUID picks the lowest host uid no sandbox of rt holds and
// records it in dir (the new sandbox's directory, in rt).
func allocHostUID(rt, dir string) (int, error) {
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
	known := uidCache.m[rt]
	if known == nil {
		known = map[string]int{}
		uidCache.m[rt] = known
	}
	present := make(map[string]bool, len(ents))
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		present[e.Name()] = true
		uid, ok := known[e.Name()]
		if !ok {
			if uid, ok = readHostUID(filepath.Join(rt, e.Name())); ok {
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
	for uid := uidBase; uid < uidBase+uidSlots; uid++ {
		if used[uid] {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, uidFile), []byte(strconv.Itoa(uid)), 0o600); err != nil {
			return 0, fmt.Errorf("host uid allocation: %w", err)
		}
		if filepath.Dir(dir) == filepath.Clean(rt) {
			known[filepath.Base(dir)] = uid
		}
		return uid, nil
	}
	return 0, errors.New("host uid allocation: all 65536 host uids of the range are held by sandboxes")
}

// uidCache holds the uids of the runtime directories' sandboxes, by
// runtime directory and directory name.
var uidCache = struct {
	sync.Mutex
	m map[string]map[string]int
}{m: map[string]map[string]int{}}

func readHostUID(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, uidFile))
	if err != nil {
		return 0, false
	}
	uid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return uid, err == nil && uid >= uidBase && uid < uidBase+uidSlots
}

// rootHostUID is the host uid (and gid) the sandbox's root user maps to:
// one of its own per sandbox, the user's slot in the range right above
// (0x70010000 + slot), so that it is no other sandbox's and no host user's.
func rootHostUID(userHostUID int) int { return userHostUID + uidSlots }
