package envd

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
)

// dirWatcher turns inotify events under root into FilesystemEvents with
// names relative to root. One inotify instance per watcher keeps watchers
// independent (closing one never disturbs another).
type dirWatcher struct {
	root         string
	recursive    bool
	includeEntry bool
	dropWhenFull bool

	f      *os.File
	fd     int
	stop   func() // instead of closing f: a watch run by the filesystem helper
	events chan *fspb.FilesystemEvent
	done   chan struct{}
	once   sync.Once

	wds     map[int32]string // watch descriptor → directory relative to root ("" = root); reader goroutine only
	dropped atomic.Int64
	errMu   sync.Mutex
	errVal  error
}

func (w *dirWatcher) close() {
	w.once.Do(func() {
		close(w.done)
		if w.stop != nil {
			w.stop()
		} else {
			w.f.Close()
		}
	})
}

func (w *dirWatcher) err() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.errVal
}

// emit queues ev. Polled watchers drop events when their bounded queue is
// full; streamed watchers wait (backpressure) until the stream takes it.
func (w *dirWatcher) emit(ev *fspb.FilesystemEvent) bool {
	if w.dropWhenFull {
		select {
		case w.events <- ev:
		case <-w.done:
			return false
		default:
			if w.dropped.Add(1) == 1 {
				slog.Warn("envd: watcher queue full, dropping events until polled", "root", w.root)
			}
		}
		return true
	}
	select {
	case w.events <- ev:
		return true
	case <-w.done:
		return false
	}
}

func randomID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(errors.New("crypto/rand failed")) // never happens on Linux
	}
	return hex.EncodeToString(b[:])
}
