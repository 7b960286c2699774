// Reading a kernel process's output: its pipes and frames, and the pump
// that turns them into items for the attached sink.

package kernel

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/code-sandboxes/code-sandboxes/internal/rawio"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// readPipe reads one output pipe, splitting off sync markers and never
// splitting a UTF-8 sequence across two chunks.
func readPipe(f *os.File, token []byte, out chan<- pipeItem) {
	defer close(out)
	sc := newMarkerScanner(token)
	buf := make([]byte, pipeChunk)
	var carry []byte // incomplete UTF-8 sequence, at most 3 bytes
	var batch []byte // text of this read, handed over as one chunk
	now := time.Now()
	text := func(p []byte) {
		batch = append(batch, p...)
	}
	flushText := func(final bool) {
		if len(carry) > 0 {
			batch = append(carry, batch...)
			carry = nil
		}
		if !final {
			if i := incompleteUTF8(batch); i > 0 {
				carry = append([]byte(nil), batch[len(batch)-i:]...)
				batch = batch[:len(batch)-i]
			}
		}
		if len(batch) > 0 {
			out <- pipeItem{text: batch, at: now}
			batch = nil
		}
	}
	mark := func(n uint64) {
		flushText(false)
		out <- pipeItem{mark: n, isMk: true}
	}
	r := rawio.Reader(f)
	for {
		n, err := r.Read(buf)
		now = time.Now()
		if n > 0 {
			sc.feed(buf[:n], text, mark)
			flushText(false)
		}
		if err != nil {
			sc.flush(text)
			flushText(true)
			return
		}
	}
}

// incompleteUTF8 returns how many trailing bytes of b start a UTF-8 sequence
// that is not complete yet (0 if none).
func incompleteUTF8(b []byte) int {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return 0
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}

// readFrames reads the kernel's event channel until EOF or a protocol error.
func readFrames(f *os.File, max int, out chan<- frameItem) {
	defer close(out)
	r := bufio.NewReaderSize(rawio.Reader(f), 64<<10)
	for {
		p, err := readFrame(r, max)
		if err != nil {
			out <- frameItem{err: err}
			return
		}
		fr, err := decodeFrame(p)
		if err != nil {
			out <- frameItem{err: err}
			return
		}
		if trace.On() {
			trace.Mark("kernel: frame " + fr.T)
		}
		out <- frameItem{f: fr}
	}
}

// pump merges the two output pipes and the event channel into one ordered
// stream (see py/protocol.py for the marker scheme), then reports the kernel's
// death. It is the only goroutine that decides order, so ordering needs no
// locks; every channel it reads is bounded, so memory is too.
func (k *kproc) pump(outCh, errCh <-chan pipeItem, frCh <-chan frameItem) {
	pipes := [2]<-chan pipeItem{outCh, errCh}
	var epoch [2]uint64 // last marker seen per pipe
	var eof [2]bool
	var processed uint64
	var pending *wireFrame
	var reason string
	protocolErr := false
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	waiting := false
	var marked [2]bool // our own markers for the pending frame are written

	satisfied := func(i int) bool {
		return eof[i] || pending.M&(1<<i) == 0 || epoch[i] >= pending.E
	}
loop:
	for {
		if pending != nil && pending.M&frameGoMarks != 0 {
			// A pipe too full for the marker gets it once its reader made
			// room (this runs again after each pipe item).
			for i := range marked {
				if !marked[i] && !satisfied(i) {
					marked[i] = k.writeMarker(i, pending.E)
				}
			}
		}
		if pending != nil && satisfied(0) && satisfied(1) {
			if pending.E > processed {
				processed = pending.E
			}
			if pending.T != "sync" {
				k.deliver(item{kind: itemFrame, frame: pending, at: time.Now()})
			}
			pending = nil
			if waiting {
				idle.Stop()
				waiting = false
			}
			continue
		}
		limit := processed + 1
		if pending != nil {
			limit = pending.E
			if !waiting {
				idle.Reset(markerWait)
				waiting = true
			}
		}
		var pc [2]<-chan pipeItem
		for i := range pipes {
			if !eof[i] && epoch[i] < limit {
				pc[i] = pipes[i]
			}
		}
		var fc <-chan frameItem
		if pending == nil {
			fc = frCh
		}
		select {
		case it, ok := <-pc[0]:
			k.onPipe(0, it, ok, &epoch, &eof)
			if waiting {
				idle.Reset(markerWait)
			}
		case it, ok := <-pc[1]:
			k.onPipe(1, it, ok, &epoch, &eof)
			if waiting {
				idle.Reset(markerWait)
			}
		case fi, ok := <-fc:
			switch {
			case !ok:
				reason = "the kernel's event channel closed"
				break loop
			case fi.err != nil:
				if errors.Is(fi.err, io.EOF) {
					reason = "the kernel's event channel closed"
				} else {
					reason = fi.err.Error()
					protocolErr = true
				}
				break loop
			default:
				pending = fi.f
				if pending.M&frameGoMarks != 0 {
					if k.marksFinal() {
						pending.M |= 3 // both pipes, marked by us
						marked = [2]bool{}
					} else {
						pending.M &^= frameGoMarks // we never offered: no meaning
					}
				}
			}
		case <-idle.C:
			// The marker never came: stop waiting for it (see markerWait).
			waiting = false
			for i := range epoch {
				if !satisfied(i) {
					epoch[i] = pending.E
				}
			}
		}
	}
	idle.Stop()
	// Our write ends would keep the pipes from ever reaching EOF.
	k.closeMarkers()

	// The event channel is gone: the kernel exited, or broke the protocol and
	// must be killed. Either way its process group goes too (no orphans), and
	// the output it wrote before is still delivered.
	if !protocolErr {
		// EOF: normally the kernel is exiting. If it is still alive shortly
		// after, user code closed fd 4 and the kernel can't talk any more.
		t := time.NewTimer(300 * time.Millisecond)
		select {
		case <-k.exited:
		case <-k.killed:
		case <-t.C:
			protocolErr = true
			reason = "the kernel closed its event channel (fd 4)"
		}
		t.Stop()
	}
	if protocolErr {
		k.kill("")
	}
	k.signal(syscall.SIGKILL) // orphans in the group; harmless if none
	deadline := time.NewTimer(drainWait)
	for !eof[0] || !eof[1] {
		select {
		case it, ok := <-pipes[0]:
			k.onPipeDrain(0, it, ok, &eof)
		case it, ok := <-pipes[1]:
			k.onPipeDrain(1, it, ok, &eof)
		case <-deadline.C:
			// Someone outside the group holds the pipes: stop reading.
			k.outR.Close()
			k.errR.Close()
			for i, p := range pipes {
				for range p {
				}
				eof[i] = true
			}
		}
	}
	deadline.Stop()
	<-k.exited
	k.outR.Close()
	k.errR.Close()
	k.evtR.Close()
	k.cmdW.Close()
	d := &death{reason: describeExit(k.waitErr, reason, protocolErr)}
	select {
	case <-k.killed:
		if k.killWhy != "" {
			d.reason = k.killWhy
		}
	default:
	}
	k.sinkMu.Lock()
	k.dead = d
	k.sinkMu.Unlock()
	k.deliver(item{kind: itemDead, dead: d})
	close(k.done)
}

func (k *kproc) onPipe(i int, it pipeItem, ok bool, epoch *[2]uint64, eof *[2]bool) {
	switch {
	case !ok:
		eof[i] = true
	case it.isMk:
		if it.mark > epoch[i] {
			epoch[i] = it.mark
		}
	default:
		k.deliver(item{kind: itemText, stream: i + 1, text: it.text, at: it.at})
	}
}

func (k *kproc) onPipeDrain(i int, it pipeItem, ok bool, eof *[2]bool) {
	if !ok {
		eof[i] = true
	} else if !it.isMk {
		k.deliver(item{kind: itemText, stream: i + 1, text: it.text, at: it.at})
	}
}

// describeExit says how the kernel ended, for the KernelDied error event.
func describeExit(waitErr error, reason string, protocolErr bool) string {
	if protocolErr {
		return reason + "; the kernel was killed"
	}
	var ws syscall.WaitStatus
	var ee *exec.ExitError
	var es exitStatus
	switch {
	case waitErr == nil:
		return "the kernel process exited with status 0"
	case errors.As(waitErr, &es):
		ws = syscall.WaitStatus(es)
	case errors.As(waitErr, &ee):
		w, ok := ee.Sys().(syscall.WaitStatus)
		if !ok {
			return fmt.Sprintf("the kernel process exited with status %d", ee.ExitCode())
		}
		ws = w
	default:
		return "the kernel process ended: " + waitErr.Error()
	}
	if !ws.Signaled() {
		return fmt.Sprintf("the kernel process exited with status %d", ws.ExitStatus())
	}
	sig := ws.Signal()
	how := fmt.Sprintf("the kernel process was killed by signal %d (%s)", int(sig), sig)
	switch sig {
	case syscall.SIGKILL:
		how += "; it was killed from outside or ran out of memory"
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGABRT:
		how += "; the interpreter or a native extension crashed"
	}
	return how
}
