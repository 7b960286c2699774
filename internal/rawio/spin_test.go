//go:build linux

package rawio

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// ReadSpin takes an answer that comes while it spins without sleeping,
// sleeps in the poller once its time is up (and still gets what comes
// later), honours the read deadline and reports EOF.
func TestReadSpin(t *testing.T) {
	r, w := pipe(t)
	f, err := New(r)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)

	// The answer comes 2 ms into a 5 s spin: read without sleeping.
	go func() { time.Sleep(2 * time.Millisecond); _, _ = w.Write([]byte("soon")) }()
	n, slept, err := f.ReadSpin(buf, time.Now().Add(5*time.Second))
	if err != nil || string(buf[:n]) != "soon" || slept {
		t.Fatalf("answer within the spin: %q slept=%v %v; want \"soon\" without sleeping", buf[:n], slept, err)
	}

	// The spin is over before the answer: it sleeps, then reads it.
	go func() { time.Sleep(20 * time.Millisecond); _, _ = w.Write([]byte("late")) }()
	start := time.Now()
	n, slept, err = f.ReadSpin(buf, start.Add(time.Millisecond))
	if err != nil || string(buf[:n]) != "late" || !slept {
		t.Fatalf("answer after the spin: %q slept=%v %v; want \"late\" after sleeping", buf[:n], slept, err)
	}

	// A read deadline ends the wait, spin or not.
	if err := r.SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.ReadSpin(buf, time.Now().Add(time.Millisecond))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the read deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = r.SetReadDeadline(time.Time{})

	// The writer's end closed: EOF, within the spin.
	w.Close()
	if _, slept, err = f.ReadSpin(buf, time.Now().Add(5*time.Second)); err != io.EOF || slept {
		t.Fatalf("closed writer: slept=%v %v, want io.EOF without sleeping", slept, err)
	}
}
