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
