package kernel

import (
	_ "embed"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/rawio"
)

// pipeChunk bounds one read from an output pipe (and so one stdout/stderr event).
const pipeChunk = 64 << 10

// pipeSize asks Linux for bigger output pipes: fewer context switches when a
// cell prints a lot. Best effort.
const pipeSize = 1 << 20

// markerWait bounds how long a frame waits for a pipe's sync marker when the
// pipe shows no progress at all: markers are written before the frame, so
// silence means the marker went elsewhere (hostile code) and waiting longer
// would only hang the execution.
const markerWait = 2 * time.Second

// drainWait bounds how long output is collected after the kernel's event
// channel closed: a child that escaped the process group may hold the pipes
// open forever.
const drainWait = time.Second

type itemKind int

const (
	itemText itemKind = iota
	itemFrame
	itemDead
)

// item is one unit the pump delivers, in order, to the execution attached to
// the kernel.
type item struct {
	kind   itemKind
	stream int // 1 stdout, 2 stderr (itemText)
	text   []byte
	at     time.Time
	frame  *wireFrame
	dead   *death
}

// death describes why a kernel process is gone.
type death struct {
	reason string // human readable: exit status, signal, protocol error
}

// pipeItem is what a pipe reader hands to the pump.
type pipeItem struct {
	text []byte
	mark uint64
	isMk bool
	at   time.Time
}

// frameItem is what the frame reader hands to the pump.
type frameItem struct {
	f   *wireFrame
	err error // terminal: EOF or protocol error
}

// sink receives the items for one execution.
type sink struct {
	ch   chan item
	gone chan struct{}
}

// kproc is one running kernel process and the goroutines reading it.
type kproc struct {
	proc  kernelProc
	pid   int
	cmdW  *os.File
	outR  *os.File
	errR  *os.File
	evtR  *os.File
	token []byte
	count int // executions run in this process
	// markW are our own write ends of the stdout and stderr pipes (-1:
	// none), opened non-blocking, on which the pump writes the sync markers
	// of a command's final frame itself (frameGoMarks): the kernel then
	// needs two writes fewer per cell, and we no wake-ups for them.
	markW [2]int

	writeMu sync.Mutex // serialises command writes

	sinkMu sync.Mutex
	sink   *sink
	dead   *death // set before done is closed

	exited  chan struct{} // closed after Wait returned
	waitErr error
	done    chan struct{} // closed when the pump has finished (process reaped)
	killed  chan struct{} // closed by kill()
	killOne sync.Once
	killWhy string // set by the first kill(): why we killed it
}

// frameSlack is room for JSON structure around an event of maxEvent bytes.
const frameSlack = 1 << 20

// write sends one command frame; errors mean the kernel is gone, which the
// pump reports on its own.
func (k *kproc) write(b []byte) {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	k.cmdW.Write(b)
}

// send sends a command without waiting for the kernel to read it: a short
// one (most cells) in one non-blocking write from here, so the kernel wakes
// before we set up the wait for its answer; a longer one, or one the pipe
// can't take now, from a goroutine of its own (a kernel that doesn't read
// must not hold the caller, whose wait honours its context).
func (k *kproc) send(b []byte) {
	if len(b) <= pipeAtomic && k.writeMu.TryLock() {
		sent := false
		if rc, err := k.cmdW.SyscallConn(); err == nil {
			// Returning true: one attempt, never a wait for room. Up to
			// PIPE_BUF bytes go in whole or not at all.
			_ = rc.Write(func(fd uintptr) bool {
				n, err := rawio.Write(int(fd), b)
				sent = err == nil && n == len(b)
				return true
			})
		}
		k.writeMu.Unlock()
		if sent {
			return
		}
	}
	go k.write(b)
}

// pipeAtomic is PIPE_BUF on Linux: a write of at most this many bytes to a
// pipe is never split.
const pipeAtomic = 4096

// frameGoMarks in a frame's mask: the kernel wrote no sync markers for it
// and tagged it with a fresh epoch; we write markers with that epoch to both
// pipes when we read the frame. The pipes are FIFOs, so what the kernel and
// its children wrote to them before the frame comes before our markers,
// exactly as before the kernel's own. The kernel uses it only for a
// command's final frame (done, a main result sent with done, reply), which
// no output of the command follows, and only when hello offered it.
const frameGoMarks = 4

// marksFinal reports whether this kernel has our write ends of its pipes.
func (k *kproc) marksFinal() bool { return k.markW[0] >= 0 && k.markW[1] >= 0 }

// writeMarker writes the sync marker of epoch to pipe i (0 stdout, 1
// stderr) without blocking; false: the pipe is full, try again later. A
// marker is shorter than PIPE_BUF, so it goes in whole or not at all.
func (k *kproc) writeMarker(i int, epoch uint64) bool {
	fd := k.markW[i]
	if fd < 0 {
		return true
	}
	m := make([]byte, 0, 2+len(k.token)+maxEpochLen+1)
	m = append(append(append(m, markStart), k.token...), ':')
	m = append(strconv.AppendUint(m, epoch, 10), markEnd)
	for {
		_, err := rawio.Write(fd, m)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		// Written, or a pipe that can't take it any more: the pipe's EOF or
		// markerWait ends the wait then.
		return true
	}
}

// closeMarkers closes our write ends of the output pipes (the pump, once
// the kernel's event channel ended).
func (k *kproc) closeMarkers() {
	for i, fd := range k.markW {
		if fd >= 0 {
			syscall.Close(fd)
			k.markW[i] = -1
		}
	}
}

// signal sends sig to the kernel's whole process group.
func (k *kproc) signal(sig syscall.Signal) error {
	return syscall.Kill(-k.pid, sig)
}

// kill ends the kernel and every process in its group; why (if not empty)
// replaces the exit status in the death report.
func (k *kproc) kill(why string) {
	k.killOne.Do(func() {
		k.killWhy = why
		close(k.killed)
	})
	k.signal(syscall.SIGKILL)
	// The kernel itself too, by pidfd (no pid reuse race): user code can move
	// it out of its own process group (os.setpgid into a child's group), and
	// a kernel that outlives kill would leave the pump, and every wait on
	// done, blocked forever.
	k.proc.kill()
}

// attach makes s the receiver of k's items. A kernel that has already died
// (its itemDead was delivered to an earlier sink, or to none) gets the death
// queued at once, so no waiter can miss it.
func (k *kproc) attach() *sink {
	s := &sink{ch: make(chan item, 16), gone: make(chan struct{})}
	k.sinkMu.Lock()
	k.sink = s
	if k.dead != nil {
		s.ch <- item{kind: itemDead, dead: k.dead}
	}
	k.sinkMu.Unlock()
	return s
}

// deadOrDone reports whether k has died; if it has but the pump has not yet
// closed done, it waits for that (the pump only closes done after handing
// itemDead to the attached sink, which at this point is none or a detached one).
func (k *kproc) deadOrDone() bool {
	select {
	case <-k.done:
		return true
	default:
	}
	k.sinkMu.Lock()
	d := k.dead
	k.sinkMu.Unlock()
	if d == nil {
		return false
	}
	<-k.done
	return true
}

func (k *kproc) detach(s *sink) {
	k.sinkMu.Lock()
	if k.sink == s {
		k.sink = nil
	}
	k.sinkMu.Unlock()
	close(s.gone)
}

// deliver hands an item to the attached execution; without one (between
// executions) output is discarded so background writers never block.
func (k *kproc) deliver(it item) {
	k.sinkMu.Lock()
	s := k.sink
	k.sinkMu.Unlock()
	if s == nil {
		return
	}
	select {
	case s.ch <- it:
	case <-s.gone:
	}
}
