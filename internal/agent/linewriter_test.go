package agent

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// afterReturn is a ResponseWriter that counts writes made after the
// handler returned (net/http forbids them: the writer may be reused).
type afterReturn struct {
	h        http.Header
	returned atomic.Bool
	late     atomic.Int64
}

func (a *afterReturn) Header() http.Header { return a.h }
func (a *afterReturn) WriteHeader(int)     {}
func (a *afterReturn) Write(b []byte) (int, error) {
	if a.returned.Load() {
		a.late.Add(1)
	}
	// Slow writes widen the window between the keepalive's idle check
	// and its write.
	time.Sleep(50 * time.Microsecond)
	return len(b), nil
}
func (a *afterReturn) Flush() {}

// TestKeepaliveNotAfterReturn: once the /execute handler has returned (after
// lw.close), the keepalive goroutine never writes again.
func TestKeepaliveNotAfterReturn(t *testing.T) {
	old := keepaliveEvery
	keepaliveEvery = 500 * time.Microsecond
	defer func() { keepaliveEvery = old }()
	var late int64
	for i := 0; i < 300; i++ {
		w := &afterReturn{h: http.Header{}}
		rc := http.NewResponseController(w)
		lw := newLineWriter(w, rc.Flush, rc.SetWriteDeadline)
		time.Sleep(time.Duration(i%7) * 100 * time.Microsecond)
		lw.write(ordered{{"type", "end_of_execution"}})
		time.Sleep(time.Duration(i%5) * 120 * time.Microsecond)
		lw.close()
		w.returned.Store(true)
		time.Sleep(2 * time.Millisecond)
		late += w.late.Load()
	}
	if late > 0 {
		t.Fatalf("%d keepalive writes after the handler returned", late)
	}
}

type countingWriter struct{ lines atomic.Int64 }

func (c *countingWriter) Write(b []byte) (int, error) { c.lines.Add(1); return len(b), nil }

// TestKeepaliveWhileSilent: a silent stream gets a keepalive line every
// keepaliveEvery (what lets a client's stall bound tell a long cell from a
// dead sandbox), and none once closed.
func TestKeepaliveWhileSilent(t *testing.T) {
	old := keepaliveEvery
	keepaliveEvery = 20 * time.Millisecond
	defer func() { keepaliveEvery = old }()
	w := &countingWriter{}
	lw := newLineWriter(w, func() error { return nil }, func(time.Time) error { return nil })
	for deadline := time.Now().Add(30 * time.Second); w.lines.Load() < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d keepalives in 30 s of silence at one per 20 ms", w.lines.Load())
		}
	}
	lw.close()
	n := w.lines.Load()
	time.Sleep(100 * time.Millisecond)
	if w.lines.Load() != n {
		t.Fatal("a keepalive after close")
	}
}
