package egress

import (
	"io"
	"sync"
)

// CappedWriter writes to W until Left bytes are spent, then drops (and
// still reports success): the supervisor logs refusals, and hostile code
// can cause as many as it likes.
type CappedWriter struct {
	W    io.Writer
	Left int
	mu   sync.Mutex
}

func (w *CappedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) <= w.Left {
		w.Left -= len(p)
		_, _ = w.W.Write(p)
	}
	return len(p), nil
}
