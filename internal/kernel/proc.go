package kernel

import (
	"bufio"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/code-sandboxes/code-sandboxes/internal/cpupin"
	"github.com/code-sandboxes/code-sandboxes/internal/pidwait"
	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
	"github.com/code-sandboxes/code-sandboxes/internal/rawio"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
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

// resolvePython finds the interpreter: an explicit path, a bare name looked up
// in the PATH of env, or python3 from that PATH falling back to /usr/bin/python3.
func resolvePython(python string, env []string) (string, error) {
	name := python
	if name == "" {
		name = "python3"
	}
	if strings.Contains(name, "/") {
		if err := checkExecutable(name); err != nil {
			return "", fmt.Errorf("%w: %s: %v", ErrPythonNotFound, name, err)
		}
		return name, nil
	}
	path := os.Getenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var tried []string
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if checkExecutable(p) == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if python == "" {
		const fallback = "/usr/bin/python3"
		if checkExecutable(fallback) == nil {
			return fallback, nil
		}
		tried = append(tried, fallback)
	}
	return "", fmt.Errorf("%w: %q is not in PATH (tried %s)", ErrPythonNotFound, name, strings.Join(tried, ", "))
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

var scriptOnce sync.Map // dir -> error

// kernelArgs returns the interpreter arguments. The kernel is written once to
// a cache directory and imported from there so Python caches its bytecode
// (compiling the source on every start costs more than the rest of startup;
// the cache is written even under PYTHONDONTWRITEBYTECODE, for our file only);
// when no directory is writable it is passed with -c instead.
func kernelArgs(dir string) []string {
	dir = resolveScriptDir(dir)
	if dir != "" && !strings.ContainsAny(dir, "'\\\n") {
		v, _ := scriptOnce.LoadOrStore(dir, sync.OnceValue(func() error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			p := filepath.Join(dir, kernelModule()+".py")
			if b, err := os.ReadFile(p); err == nil && isKernelSource(b) {
				return nil
			}
			tmp, err := os.CreateTemp(dir, ".kernel-*")
			if err != nil {
				return err
			}
			_, err = io.Copy(tmp, kernelReader())
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Chmod(tmp.Name(), 0o644)
			}
			if err == nil {
				err = os.Rename(tmp.Name(), p)
			}
			if err != nil {
				os.Remove(tmp.Name())
			}
			return err
		}))
		if v.(func() error)() == nil {
			return []string{"-c", fmt.Sprintf(
				"import sys;w=sys.dont_write_bytecode;sys.dont_write_bytecode=False;sys.path.insert(0,'%s');"+
					"import %s as k;del sys.path[0];sys.dont_write_bytecode=w;del w;k._main()", dir, kernelModule())}
		}
	}
	return []string{"-c", kernelSource() + "\n_main()\n"}
}

// spawned is a kernel process started and not yet spoken to: the parent's
// ends of its pipes.
type spawned struct {
	proc                   kernelProc
	pid                    int
	outR, errR, cmdW, evtR *os.File
	markW                  [2]int // kproc.markW
}

// kernelProc is a kernel's process: one started here (os/exec), or one
// adopted after an exec (AdoptEarly).
type kernelProc interface {
	// kill SIGKILLs the process itself (not by pid: no reuse race).
	kill() error
	// wait reaps it: nil for exit status 0, else an error describeExit
	// reads (*exec.ExitError, exitStatus).
	wait() error
}

// osProc is a kernel started here.
type osProc struct{ p *os.Process }

func (o osProc) kill() error { return o.p.Kill() }

// wait reaps the process as exec.Cmd.Wait would: an *exec.ExitError
// unless it exited with status 0.
func (o osProc) wait() error {
	// A kernel lives as long as its sandbox: wait on the poller, not
	// with a thread blocked in waitid (pidwait).
	pidwait.Exited(o.p.Pid)
	st, err := o.p.Wait()
	if err != nil {
		return err
	}
	if !st.Success() {
		return &exec.ExitError{ProcessState: st}
	}
	return nil
}

// exitStatus is how an adopted kernel ended, other than with status 0.
type exitStatus syscall.WaitStatus

func (e exitStatus) Error() string {
	ws := syscall.WaitStatus(e)
	if ws.Signaled() {
		return "signal: " + ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

// spawn starts a kernel process with o (python resolved in o's PATH, cwd
// checked) and closes the child's ends of its pipes here.
func spawn(o *Options) (*spawned, error) {
	python, err := resolvePython(o.Python, o.env())
	if err != nil {
		return nil, err
	}
	if o.Cwd != "" {
		if st, err := os.Stat(o.Cwd); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("kernel: working directory %q is not a directory: %v", o.Cwd, err)
		}
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	mk := os.Pipe
	pipe := func() (r, w *os.File, err error) {
		r, w, err = mk()
		if err == nil {
			files = append(files, r, w)
		}
		return
	}
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	if o.ProtocolPipe != nil {
		mk = o.ProtocolPipe
	}
	cmdR, cmdW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	evtR, evtW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	for _, f := range []*os.File{outW, errW, evtW} {
		setPipeSize(f)
	}
	// After setPipeSize: the child's ends must stay blocking, and these
	// are open file descriptions of their own, non-blocking.
	markW := reopenWriteFDs(int(outW.Fd()), int(errW.Fd()))
	closeMarkW := func() {
		for _, fd := range markW {
			if fd >= 0 {
				syscall.Close(fd)
			}
		}
	}
	attr := &syscall.SysProcAttr{}
	if o.SysProcAttr != nil {
		a := *o.SysProcAttr
		attr = &a
	}
	// Own process group: Interrupt and kill reach the kernel's children too.
	attr.Setpgid = true
	attr.Pgid = 0
	setDeathSignal(attr)
	cmd := &exec.Cmd{
		Path:        python,
		Args:        append([]string{python}, kernelArgs(o.ScriptDir)...),
		Env:         o.env(),
		Dir:         o.Cwd,
		Stdout:      outW,
		Stderr:      errW,
		ExtraFiles:  []*os.File{cmdR, evtW}, // fd 3, fd 4
		SysProcAttr: attr,
	}
	// With the agent's full CPU set, not the CPU it is pinned to.
	if err := cpupin.Start(cmd); err != nil {
		closeAll()
		closeMarkW()
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%w: %s: %v", ErrPythonNotFound, python, err)
		}
		return nil, fmt.Errorf("kernel: starting %s: %w", python, err)
	}
	trace.Mark("kernel: spawned")
	// Under a memory limit the kernel, not the agent, is the OOM victim.
	_ = procstat.SetOOMScoreAdj(cmd.Process.Pid, procstat.OOMScoreUserCode)
	outW.Close()
	errW.Close()
	cmdR.Close()
	evtW.Close()
	return &spawned{proc: osProc{cmd.Process}, pid: cmd.Process.Pid, outR: outR, errR: errR, cmdW: cmdW, evtR: evtR, markW: markW}, nil
}

// startKernel starts a kernel process (or takes o.Early's) and the
// goroutines that read it.
func startKernel(o *Options) (*kproc, error) {
	sp := o.Early.take()
	if sp == nil {
		var err error
		if sp, err = spawn(o); err != nil {
			return nil, err
		}
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	token := []byte(hex.EncodeToString(tok))
	k := &kproc{
		proc: sp.proc, pid: sp.pid, cmdW: sp.cmdW, outR: sp.outR, errR: sp.errR, evtR: sp.evtR, token: token, markW: sp.markW,
		exited: make(chan struct{}), done: make(chan struct{}), killed: make(chan struct{}),
	}
	goMarks := "0"
	if k.marksFinal() {
		goMarks = "1"
	}
	// The kernel waits for commands on the agent's CPU (cpupin; -1: it
	// doesn't pin), and runs user code on the agent's set from before it
	// pinned itself: an early kernel started away from the agent's CPU
	// (cpupin.Away) takes that set back ("": leave the set as it is).
	cpu := strconv.Itoa(cpupin.CPU())
	// The hello frame fits in the pipe buffer: no need to wait for Python.
	k.write(encodeCommand([]byte("hello"), token, []byte(strconv.Itoa(o.maxEvent())), []byte(strconv.Itoa(o.maxEvent()+frameSlack)), []byte(o.language()), []byte(goMarks), []byte(cpu), []byte(cpupin.Full())))
	go func() {
		k.waitErr = sp.proc.wait()
		close(k.exited)
	}()
	outCh := make(chan pipeItem, 8)
	errCh := make(chan pipeItem, 8)
	frCh := make(chan frameItem, 2)
	go readPipe(sp.outR, token, outCh)
	go readPipe(sp.errR, token, errCh)
	go readFrames(sp.evtR, o.maxEvent()+frameSlack, frCh)
	go k.pump(outCh, errCh, frCh)
	return k, nil
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
