package envd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
)

const (
	// maxChunk bounds one data event (the SDKs handle any size, but small
	// events keep latency low and per-subscriber memory predictable).
	maxChunk = 32 * 1024
	// subscriberQueue is the number of data events buffered per subscriber:
	// at most subscriberQueue*maxChunk = 2 MiB per client.
	subscriberQueue = 64
	// DefaultStallTimeout is how long one full subscriber may hold back a
	// process's output (and so every other subscriber) before it is cut off.
	DefaultStallTimeout = 15 * time.Second
	// exitDrainGrace is how long output readers keep waiting for EOF after
	// the process exited: a background child that inherited stdout would
	// otherwise keep the stream open forever.
	exitDrainGrace = 250 * time.Millisecond
)

// subscriber is one stream (Start or Connect) receiving a process's output.
//
// Flow control: each subscriber has a bounded queue. The output readers wait
// for space (backpressure through the pipe to the process, so fast output is
// never lost for a client that keeps up), but only for stallTimeout per
// event; a subscriber that stays full longer is cut off with
// resource_exhausted and the others proceed. Output nobody subscribes to is
// read and discarded, so an unwatched process never blocks on a full pipe.
type subscriber struct {
	ch     chan *pb.ProcessEvent
	done   chan struct{} // closed after the last data event: read proc.end
	gone   chan struct{} // closed when the stream ends
	kicked chan struct{} // closed when cut off for being too slow
}

// proc is one running process.
type proc struct {
	pid   uint32
	info  *pb.ProcessInfo
	cmd   *exec.Cmd
	pgid  int
	stall time.Duration

	ioMu  sync.Mutex // serialises input writes (and their deadlines)
	stdin *os.File   // write end of the stdin pipe; nil if none or closed
	pty   *os.File   // PTY master; nil for pipe processes

	readEnds []*os.File // parent's ends of the output (pipes or PTY master)

	bcast sync.Mutex // held while one chunk is delivered to all subscribers
	mu    sync.Mutex
	subs  map[*subscriber]struct{}
	end   *pb.ProcessEvent_EndEvent
}

func newSubscriber() *subscriber {
	return &subscriber{
		ch:     make(chan *pb.ProcessEvent, subscriberQueue),
		done:   make(chan struct{}),
		gone:   make(chan struct{}),
		kicked: make(chan struct{}),
	}
}

// subscribe adds a subscriber; if the process already ended it is told so
// at once.
func (p *proc) subscribe(s *subscriber) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		close(s.done)
		return
	}
	p.subs[s] = struct{}{}
}

func (p *proc) unsubscribe(s *subscriber) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.subs, s)
	select {
	case <-s.gone:
	default:
		close(s.gone)
	}
}

// broadcast delivers one output chunk to every subscriber (see subscriber).
func (p *proc) broadcast(ev *pb.ProcessEvent) {
	p.bcast.Lock()
	defer p.bcast.Unlock()
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
			continue
		case <-s.gone:
			continue
		default:
		}
		t := time.NewTimer(p.stall)
		select {
		case s.ch <- ev:
		case <-s.gone:
		case <-t.C:
			p.mu.Lock()
			if _, ok := p.subs[s]; ok {
				delete(p.subs, s)
				close(s.kicked)
			}
			p.mu.Unlock()
		}
		t.Stop()
	}
}

// finish records the end event after all output was broadcast.
func (p *proc) finish(end *pb.ProcessEvent_EndEvent) {
	p.bcast.Lock()
	defer p.bcast.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.end = end
	for s := range p.subs {
		close(s.done)
	}
	p.subs = map[*subscriber]struct{}{}
}

// readOutput copies one output stream of the process into data events until
// EOF (or, after exit, until the drain grace is over).
func (p *proc) readOutput(f *os.File, wrap func([]byte) *pb.ProcessEvent_DataEvent) {
	defer f.Close()
	buf := make([]byte, maxChunk)
	emit := func(b []byte) {
		p.mu.Lock()
		idle := len(p.subs) == 0
		p.mu.Unlock()
		if idle {
			return // nobody is listening: discard without allocating
		}
		p.broadcast(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: wrap(append([]byte(nil), b...))}})
	}
	for {
		n, err := f.Read(buf)
		if n > 0 {
			emit(buf[:n])
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				drainNow(f, buf, emit)
			}
			return
		}
	}
}

// drainNow emits whatever is buffered in f right now without waiting: after
// the exit grace the read deadline has passed, but bytes the process wrote
// before exiting must still be delivered.
func drainNow(f *os.File, buf []byte, emit func([]byte)) {
	_ = f.SetReadDeadline(time.Time{})
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true // never wait for readiness
		}); err != nil || rerr != nil || n <= 0 {
			return
		}
		emit(buf[:n])
	}
}

// pump sends a subscriber's events to a stream until the process ends, the
// client goes away or it is cut off. Keepalives fill silences.
func (p *proc) pump(ctx context.Context, s *subscriber, keepalive time.Duration, send func(*pb.ProcessEvent) error) error {
	defer p.unsubscribe(s)
	ka := time.NewTimer(keepalive)
	defer ka.Stop()
	for {
		var ev *pb.ProcessEvent
		select {
		case ev = <-s.ch:
		case <-s.done:
		drain:
			for {
				select {
				case ev := <-s.ch:
					if err := send(ev); err != nil {
						return err
					}
				default:
					break drain
				}
			}
			p.mu.Lock()
			end := p.end
			p.mu.Unlock()
			return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}})
		case <-s.kicked:
			return connect.NewError(connect.CodeResourceExhausted,
				fmt.Errorf("client did not read the output of process %d for %s; stream closed (the process keeps running, use Connect to re-attach)", p.pid, p.stall))
		case <-ka.C:
			ev = &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}
		case <-ctx.Done():
			return streamCtxErr(ctx)
		}
		if err := send(ev); err != nil {
			return err
		}
		ka.Reset(keepalive)
	}
}

// signal sends sig to the process group (the shell and everything it
// started), falling back to the process itself.
func (p *proc) signal(sig unix.Signal) error {
	err := unix.Kill(-p.pgid, sig)
	if errors.Is(err, unix.ESRCH) {
		err = unix.Kill(int(p.pid), sig)
		if errors.Is(err, unix.ESRCH) {
			return nil // already gone
		}
	}
	return err
}

// writeInput writes b to the process's stdin pipe or PTY. A process that
// does not read its input must not hang the RPC forever: the write honours
// the request deadline, or a default one.
func (p *proc) writeInput(ctx context.Context, f *os.File, b []byte) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(60 * time.Second)
	}
	_ = f.SetWriteDeadline(deadline)
	defer f.SetWriteDeadline(time.Time{})
	_, err := f.Write(b)
	return err
}

// endEvent builds the end event from Wait's result, like envd: status is
// ProcessState.String() and error is Wait's error text, absent on success.
func endEvent(ps *os.ProcessState, waitErr error) *pb.ProcessEvent_EndEvent {
	end := &pb.ProcessEvent_EndEvent{}
	if ps != nil {
		end.ExitCode = int32(ps.ExitCode())
		end.Exited = ps.Exited()
		end.Status = ps.String()
	}
	if waitErr != nil {
		msg := waitErr.Error()
		end.Error = &msg
	}
	return end
}
