//go:build linux

package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func pipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// A blocking descriptor is refused: a raw read on it would stall every
// goroutine sharing the thread's P.
func TestBlockingRefused(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(p[0]), "blocking")
	defer f.Close()
	defer syscall.Close(p[1])
	if _, err := New(f); !errors.Is(err, ErrBlocking) {
		t.Fatalf("New on a blocking pipe: %v, want ErrBlocking", err)
	}
	if Reader(f) != io.Reader(f) {
		t.Fatal("Reader of a blocking file is not the file itself")
	}
}

// What is written comes out whole, including more than the pipe holds
// (the writer waits in the poller for the reader), and EOF after close.
func TestPipeRoundTrip(t *testing.T) {
	r, w := pipe(t)
	rd, wr := Reader(r), Writer(w)
	if _, ok := rd.(*FD); !ok {
		t.Fatalf("Reader(os.Pipe end) = %T, want *FD", rd)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, beyond the pipe's buffer
	errc := make(chan error, 1)
	go func() {
		n, err := wr.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		w.Close()
		errc <- err
	}()
	got, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d identical", len(got), len(want))
	}
}

// A read deadline ends a raw read that has nothing to read, and Close ends
// one that is waiting: a silent peer can't hold a goroutine.
func TestDeadlineAndClose(t *testing.T) {
	r, _ := pipe(t)
	rd := Reader(r)
	_ = r.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := rd.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	_ = r.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := rd.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	r.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("a read on a closed pipe returned no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a waiting raw read")
	}
}

// A write to a pipe whose reader is gone is EPIPE, matchable with errors.Is.
func TestWriteBrokenPipe(t *testing.T) {
	r, w := pipe(t)
	r.Close()
	_, err := Writer(w).Write([]byte("x"))
	if !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a pipe without a reader: %v, want EPIPE", err)
	}
}

// A unix socket (what the agent's lean connection is) and a write
// deadline: a peer that stops reading can't hold the writer.
func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Writer(c).Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(Reader(s), buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}
	// Bytes s never reads, whether or not the write below gets any in
	// before its deadline (on a loaded machine it may pass before the
	// first try).
	if _, err := Writer(c).Write([]byte("unread")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	big := make([]byte, 64<<20) // more than the socket buffers hold; s never reads
	n, err := Writer(c).Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(big) {
		t.Fatalf("write to a peer that doesn't read: %d bytes, %v; want the deadline", n, err)
	}
	// s closes with c's bytes unread: the kernel resets the connection,
	// and the error says so in a form errors.Is matches.
	s.Close()
	if n, err := Reader(c).Read(buf); n != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after the peer closed unread: %d, %v; want ECONNRESET", n, err)
	}
}
