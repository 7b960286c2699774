package envd

import (
	"bytes"
	"encoding/binary"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
)

// inotifyMask is what we watch on every directory. *_SELF events are used
// only for the root: a subdirectory's removal is already reported by its
// parent.
const inotifyMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_DONT_FOLLOW

func newDirWatcher(root string, recursive, includeEntry bool, queue int, dropWhenFull bool) (*dirWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	w := &dirWatcher{
		root: root, recursive: recursive, includeEntry: includeEntry, dropWhenFull: dropWhenFull,
		// A non-blocking fd wrapped by os.NewFile goes through the runtime
		// poller, so Close unblocks a pending Read.
		f:      os.NewFile(uintptr(fd), "inotify"),
		fd:     fd,
		events: make(chan *fspb.FilesystemEvent, queue),
		done:   make(chan struct{}),
		wds:    map[int32]string{},
	}
	if err := w.addTree(""); err != nil {
		w.f.Close()
		return nil, err
	}
	go w.run()
	return w, nil
}

// addTree watches the directory rel (relative to root) and, when recursive,
// every directory below it. Only the root's failure is fatal: a subdirectory
// may vanish or be unreadable.
func (w *dirWatcher) addTree(rel string) error {
	abs := filepath.Join(w.root, rel)
	wd, err := unix.InotifyAddWatch(w.fd, abs, inotifyMask)
	if err != nil {
		if rel == "" {
			return &fs.PathError{Op: "inotify_add_watch", Path: abs, Err: err}
		}
		return nil
	}
	w.wds[int32(wd)] = rel
	if !w.recursive {
		return nil
	}
	des, err := os.ReadDir(abs)
	if err != nil {
		return nil
	}
	for _, de := range des {
		if de.IsDir() { // DirEntry.IsDir does not follow symlinks: no loops
			_ = w.addTree(filepath.Join(rel, de.Name()))
		}
	}
	return nil
}

// handle parses one read's worth of inotify events; false ends the watch.
func (w *dirWatcher) handle(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:4]))
		mask := binary.NativeEndian.Uint32(b[4:8])
		nameLen := int(binary.NativeEndian.Uint32(b[12:16]))
		end := unix.SizeofInotifyEvent + nameLen
		if end > len(b) {
			return true
		}
		name := string(bytes.TrimRight(b[unix.SizeofInotifyEvent:end], "\x00"))
		b = b[end:]

		if mask&unix.IN_Q_OVERFLOW != 0 {
			slog.Warn("envd: inotify queue overflow, filesystem events were dropped", "root", w.root)
			continue
		}
		dir, known := w.wds[wd]
		if mask&unix.IN_IGNORED != 0 {
			delete(w.wds, wd)
			if known && dir == "" {
				return false // the watched directory itself is gone
			}
			continue
		}
		if !known {
			continue
		}
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			if dir == "" {
				typ := fspb.EventType_EVENT_TYPE_REMOVE
				if mask&unix.IN_MOVE_SELF != 0 {
					typ = fspb.EventType_EVENT_TYPE_RENAME
				}
				if !w.emit(&fspb.FilesystemEvent{Name: "", Type: typ}) {
					return false
				}
				if typ == fspb.EventType_EVENT_TYPE_REMOVE {
					return false
				}
			}
			continue
		}
		rel := filepath.Join(dir, name)
		newDir := w.recursive && mask&unix.IN_ISDIR != 0 && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0
		var typ fspb.EventType
		switch {
		case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			typ = fspb.EventType_EVENT_TYPE_CREATE
		case mask&unix.IN_MODIFY != 0:
			typ = fspb.EventType_EVENT_TYPE_WRITE
		case mask&unix.IN_DELETE != 0:
			typ = fspb.EventType_EVENT_TYPE_REMOVE
		case mask&unix.IN_MOVED_FROM != 0:
			typ = fspb.EventType_EVENT_TYPE_RENAME
		case mask&unix.IN_ATTRIB != 0:
			typ = fspb.EventType_EVENT_TYPE_CHMOD
		default:
			continue
		}
		if !w.emitPath(rel, typ) {
			return false
		}
		if newDir && !w.addNewTree(rel) {
			return false
		}
	}
	return true
}

// addNewTree watches a directory that appeared under a recursive watch and
// reports what is already in it as created: entries made between the
// directory's creation and our watch on it (mkdir -p a/b, an unpacked
// archive) have no inotify event of their own. One made right after the
// watch may be reported twice; none is missed.
func (w *dirWatcher) addNewTree(rel string) bool {
	abs := filepath.Join(w.root, rel)
	wd, err := unix.InotifyAddWatch(w.fd, abs, inotifyMask)
	if err != nil {
		return true // gone already, or unreadable
	}
	w.wds[int32(wd)] = rel
	des, err := os.ReadDir(abs)
	if err != nil {
		return true
	}
	for _, de := range des {
		sub := filepath.Join(rel, de.Name())
		if !w.emitPath(sub, fspb.EventType_EVENT_TYPE_CREATE) {
			return false
		}
		if de.IsDir() && !w.addNewTree(sub) { // IsDir doesn't follow symlinks
			return false
		}
	}
	return true
}

// networkFS reports whether path is on a network filesystem, where inotify
// only sees local changes (envd refuses those unless allow_network_mounts).
func networkFS(path string) (string, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "", false
	}
	switch uint32(st.Type) {
	case unix.NFS_SUPER_MAGIC:
		return "nfs", true
	case unix.SMB_SUPER_MAGIC, 0xFF534D42, 0xFE534D42: // smb, cifs, smb2
		return "smb/cifs", true
	case unix.AFS_SUPER_MAGIC:
		return "afs", true
	case 0x00C36400:
		return "ceph", true
	}
	return "", false
}

func (w *dirWatcher) run() {
	defer close(w.events)
	buf := make([]byte, 64*1024)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			select {
			case <-w.done: // closed by us
			default:
				w.errMu.Lock()
				w.errVal = err
				w.errMu.Unlock()
			}
			return
		}
		if !w.handle(buf[:n]) {
			return
		}
	}
}

// emitPath queues the event typ of rel, with its entry when asked for.
func (w *dirWatcher) emitPath(rel string, typ fspb.EventType) bool {
	ev := &fspb.FilesystemEvent{Name: rel, Type: typ}
	if w.includeEntry && (typ == fspb.EventType_EVENT_TYPE_CREATE || typ == fspb.EventType_EVENT_TYPE_WRITE || typ == fspb.EventType_EVENT_TYPE_CHMOD) {
		if e, err := entryInfo(filepath.Join(w.root, rel)); err == nil {
			ev.Entry = e
		}
	}
	return w.emit(ev)
}
