package client

import (
	"fmt"
	"math"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/rawio"
)

// After sending an execution on a lean connection, the caller tries the
// connection on the CPU for up to spinWait before it sleeps in the poller
// (rawio.FD.ReadSpin). On a VM the sleep lets the caller's vCPU halt, and
// the answer then comes as an interrupt to a halted vCPU: an exit to the
// hypervisor on both sides, a large share of a 0.2 ms round trip. A short
// cell's answer comes within the spin, so the caller pays at most spinWait
// of its own CPU per execution for that.
//
// Bounds, so that it never costs more than it saves:
//   - only with two or more CPUs to run on (GOMAXPROCS, which follows a
//     container's CPU limit): on one, the spinning caller would only delay
//     the agent;
//   - at most half of those (at least one) spin at once in a process, so
//     that serve relaying many executions leaves the sandboxes their CPU;
//   - a connection whose last answer's first bytes took longer than
//     spinWait (a long cell) doesn't spin for the next one, until one
//     comes back sooner; nor does a new connection's first execution,
//     which is often a cold sandbox's first cell (its kernel still
//     starting: the CPU is better left to it).
//
// CODE_SANDBOXES_SPIN_WAIT sets spinWait (a Go duration; 0 turns it off).
const DefaultSpinWait = 500 * time.Microsecond

// SpinWaitEnv names the environment variable that sets the spin.
const SpinWaitEnv = "CODE_SANDBOXES_SPIN_WAIT"

var (
	spinWait = spinWaitFromEnv()
	spinners atomic.Int32
	// spinsTried and spinsWon count spins and the ones the answer ended
	// (tests).
	spinsTried, spinsWon atomic.Int64
)

func spinWaitFromEnv() time.Duration {
	v, ok := os.LookupEnv(SpinWaitEnv)
	if !ok {
		return DefaultSpinWait
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > 10*time.Millisecond {
		fmt.Fprintf(os.Stderr, "code-sandboxes: %s=%q is not a duration from 0 to 10ms (e.g. 500us; 0 turns spinning off): not spinning\n", SpinWaitEnv, v)
		return 0
	}
	return d
}

// spinReader is a lean connection's reader: its first read after a
// request (arm) may spin. A Close or read deadline during the spin takes
// effect when it ends (spinWait at most, 10 ms at the very most).
type spinReader struct {
	c    net.Conn
	fd   *rawio.FD // nil: no raw path here, never spins
	sent time.Time // armed when not zero
	last time.Duration
}

func newSpinReader(c net.Conn) *spinReader {
	s := &spinReader{c: c, last: math.MaxInt64}
	// Only a socket itself: a wrapper (one that buffers, say) may have
	// bytes of its own that a read of the descriptor would skip.
	switch sc := c.(type) {
	case *net.UnixConn:
		s.fd, _ = rawio.New(sc)
	case *net.TCPConn:
		s.fd, _ = rawio.New(sc)
	}
	return s
}

// arm: a request went out; the next read waits for its answer.
func (s *spinReader) arm() {
	if s != nil {
		s.sent = time.Now()
	}
}

func (s *spinReader) Read(p []byte) (int, error) {
	if s.sent.IsZero() {
		return s.c.Read(p)
	}
	sent := s.sent
	s.sent = time.Time{}
	wait := spinWait
	procs := runtime.GOMAXPROCS(0)
	spin := wait > 0 && s.fd != nil && s.last <= wait && procs >= 2
	if spin && spinners.Add(1) > int32(procs/2) {
		spinners.Add(-1)
		spin = false
	}
	var n int
	var err error
	if spin {
		spinsTried.Add(1)
		var slept bool
		n, slept, err = s.fd.ReadSpin(p, sent.Add(wait))
		spinners.Add(-1)
		if !slept {
			spinsWon.Add(1)
		}
	} else {
		n, err = s.c.Read(p)
	}
	s.last = time.Since(sent)
	return n, err
}
