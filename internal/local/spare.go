package local

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"golang.org/x/sys/unix"
)

// A spare supervisor is the sandbox binary started as a shim ahead of
// need: it has done its Go start and package inits (about 3.5 ms of a cold
// start's critical path on a 2-core host) and waits on a socket for a
// sandbox's spec. It is nobody's yet: no id, token, directory, cgroup,
// namespace or process of a sandbox exists before the spec comes, and it
// then does exactly what a supervisor started for that spec would. Like a
// cgroup created ahead, it is shared setup, not a sandbox started ahead
// (that is the warm pool).
//
// A process keeps at most one spare per kind of launch (binary and
// supervisor environment: spareKey), starts the first after its second
// cold Create (a process that creates once, like the CLI, never gets
// one), and starts the next one each time it takes one. A spare serves
// one Create: the socket carries one spec and is closed. It ends, unused,
// when the process that started it ends or drops it (EOF on its socket).
// SpareSupervisorEnv=0 turns spares off.

// SpareSupervisorEnv, "0" in the environment of the program that creates
// local sandboxes, starts every sandbox's supervisor at its Create, as
// before, instead of keeping one started ahead (spare.go).
const SpareSupervisorEnv = "CODE_SANDBOXES_SPARE_SUPERVISOR"

// shimSpareEnv marks a supervisor started as a spare: it reads its spec
// and ready pipe from the socket at fd 3 instead of its environment.
const shimSpareEnv = "CODE_SANDBOXES_SHIM_SPARE"

// maxSpareSpec bounds the spec a spare reads (the agent's config is bounded
// by earlystart.MaxConfig; the rest is small).
const maxSpareSpec = 4 << 20

// maxSpareKinds bounds how many spares a process keeps (one per kind).
const maxSpareKinds = 2

type spareShim struct {
	cmd  *exec.Cmd
	sock *os.File // our end; closing it ends the spare
}

var spares struct {
	mu       sync.Mutex
	idle     map[string]*spareShim
	order    []string // idle's kinds, oldest spare first
	starting map[string]bool
	creates  int // cold Creates that started a supervisor of their own
	gen      int // closeSpares's count: a spare started before one is discarded
}

func sparesOff() bool { return os.Getenv(SpareSupervisorEnv) == "0" }

func spareKey(exe string, env []string) string {
	return exe + "\x00" + strings.Join(env, "\x00")
}

// takeSpare returns the spare for this kind of launch, if one is idle; the
// caller owns it from then on (handOver, or discard).
func takeSpare(exe string, env []string) *spareShim {
	if sparesOff() {
		return nil
	}
	key := spareKey(exe, env)
	spares.mu.Lock()
	defer spares.mu.Unlock()
	sp := spares.idle[key]
	if sp != nil {
		delete(spares.idle, key)
		spares.order = slices.DeleteFunc(spares.order, func(k string) bool { return k == key })
	}
	return sp
}

// afterCreate runs once a cold Create's supervisor has reported: it
// starts a spare of this kind in the background if the process keeps
// creating (its second cold Create, or it just took a spare).
func afterCreate(exe string, env []string, tookSpare bool) {
	if sparesOff() {
		return
	}
	key := spareKey(exe, env)
	spares.mu.Lock()
	if !tookSpare {
		spares.creates++
	}
	if (!tookSpare && spares.creates < 2) || spares.idle[key] != nil || spares.starting[key] {
		spares.mu.Unlock()
		return
	}
	if spares.starting == nil {
		spares.starting = map[string]bool{}
	}
	spares.starting[key] = true
	gen := spares.gen
	spares.mu.Unlock()
	time.AfterFunc(SpareDelay, func() {
		var sp *spareShim
		err := isolate.CheckRoom() // no spare where a sandbox has no room
		if err == nil {
			sp, err = startSpare(exe, env)
		}
		spares.mu.Lock()
		defer spares.mu.Unlock()
		delete(spares.starting, key)
		if err != nil {
			return // the next Create starts its own supervisor, as always
		}
		if spares.gen != gen {
			sp.discard() // closeSpares ran meanwhile
			return
		}
		if spares.idle == nil {
			spares.idle = map[string]*spareShim{}
		}
		for len(spares.idle) >= maxSpareKinds && len(spares.order) > 0 {
			// The kind whose spare waited longest goes.
			spares.idle[spares.order[0]].discard()
			delete(spares.idle, spares.order[0])
			spares.order = spares.order[1:]
		}
		spares.idle[key] = sp
		spares.order = append(spares.order, key)
	})
}

// SpareDelay is how long after a Create its spare starts: after the
// sandbox's own start, which it would slow on a small host (its kernel's
// python starts for about 20 ms after the supervisor reports).
const SpareDelay = 50 * time.Millisecond

// spareArg is a spare's argument: as long as a sandbox directory's name
// (dirName), which it becomes in place once the spec comes (nameSpare), so
// that ps shows a spare's sandbox as it shows any other's.
const spareArg = "spare-waiting-for-a-sandbox-spec"

// nameSpare writes dir's name over this spare's argument, in the process's
// own argv (os.Args' strings are that memory, not copies), when it has the
// same length.
func nameSpare(dir string) {
	name := filepath.Base(dir)
	if len(os.Args) != 2 || os.Args[1] != spareArg || len(name) != len(spareArg) {
		return
	}
	copy(unsafe.Slice(unsafe.StringData(os.Args[1]), len(name)), name)
}

// spareWaiting is what a spare writes once it waits for its spec.
const spareWaiting = 'w'

// spareStartTimeout bounds a spare's start.
const spareStartTimeout = 10 * time.Second

// WaitSpares waits until no spare supervisor is starting: a benchmark's
// way to keep a spare's start, which runs beside the Create that asked for
// it, out of the next measurement (a peer's, say).
func WaitSpares() {
	for {
		spares.mu.Lock()
		n := len(spares.starting)
		spares.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// handOver gives the spare a sandbox's spec and its ready pipe's write end
// (the spare's fd 3 from then on, as a supervisor started for the spec
// has it). An error means the spare is unusable (it died): discard it and
// start a supervisor as usual.
func (sp *spareShim) handOver(spec []byte, ready *os.File) error {
	if len(spec) > maxSpareSpec {
		return fmt.Errorf("spec of %d bytes", len(spec))
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(spec)))
	c, err := sp.sock.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := c.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), hdr[:], unix.UnixRights(int(ready.Fd())), nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	if _, err := sp.sock.Write(spec); err != nil {
		return err
	}
	return sp.sock.Close()
}

// discard ends a spare that serves no sandbox (idle, or whose handover
// failed): EOF on its socket, and SIGKILL, as it holds nothing.
func (sp *spareShim) discard() {
	sp.sock.Close()
	_ = sp.cmd.Process.Kill()
}

// closeSpares ends this process's idle spares, and those starting once
// started (ClosePools).
func closeSpares() {
	spares.mu.Lock()
	defer spares.mu.Unlock()
	spares.gen++
	for _, sp := range spares.idle {
		sp.discard()
	}
	spares.idle, spares.order = nil, nil
}
