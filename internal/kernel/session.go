// Package kernel runs our own lightweight Python kernel (py/*.py, stdlib
// only, embedded) and drives it from Go: one interpreter process per context,
// started on first use, with IPython-like cell semantics (last expression as
// the main result, the display protocol, matplotlib figures, top-level await,
// sys.exit as exit code, SIGINT as interrupt) and all output — Python-level and
// fd-level from child processes — streamed live and in order before Execute
// returns.
package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Sentinel errors, matchable with errors.Is.
var (
	ErrPythonNotFound   = errors.New("kernel: python interpreter not found")
	ErrClosed           = errors.New("kernel: session closed")
	ErrVariableNotFound = errors.New("kernel: variable not found")
	ErrInvalidName      = errors.New("kernel: invalid variable name")
	ErrUnsendable       = errors.New("kernel: value cannot be transferred")
	ErrKernelDied       = errors.New("kernel: kernel process died")
)

// Defaults for Options.
const (
	DefaultMaxOutputBytes = 16 << 20
	DefaultMaxEventBytes  = 32 << 20
	DefaultKillGrace      = 2 * time.Second
)

// Options configure a Session. The zero value works: python3 from PATH, the
// current directory and environment.
type Options struct {
	// Python is the interpreter: a path, or a name looked up in the PATH of
	// Env. "" means python3 from that PATH, falling back to /usr/bin/python3.
	Python string
	// Cwd is the kernel's working directory; it must exist. "" = inherit.
	Cwd string
	// Env is the kernel's base environment; nil = os.Environ().
	Env []string
	// MaxOutputBytes caps the stdout+stderr bytes forwarded per execution
	// (default 16 MiB). Past it the rest is read and discarded, and one
	// "[output truncated: …]" line is sent on stderr at the end.
	MaxOutputBytes int64
	// MaxEventBytes caps one result/display payload (default 32 MiB). A larger
	// one is replaced by a stderr line saying it was dropped and why.
	MaxEventBytes int
	// KillGrace is how long an interrupted execution (timeout, cancelled
	// context) may take to stop before the kernel's process group is killed.
	KillGrace time.Duration
	// SysProcAttr is copied for the kernel process (e.g. Credential);
	// Setpgid is always forced on, and on Linux Pdeathsig defaults to SIGKILL.
	SysProcAttr *syscall.SysProcAttr
	// Language of the cells: "" or "python" (run by the kernel itself),
	// "bash", "javascript" or "typescript" (run by a persistent bash or node
	// that the kernel drives; see Languages for what this machine has).
	Language string
	// ScriptDir is where the kernel's source is written so Python can cache its
	// bytecode; "" = the user cache dir. If unusable, the source goes in -c.
	ScriptDir string
	// ProtocolPipe makes the kernel's command and event pipes (fds 3 and
	// 4, which carry the protocol: commands in, results and the end of
	// each execution out); nil = os.Pipe. Under gVisor the agent makes
	// them as a uid of its own, so that code in the sandbox can't open
	// them again through /proc/<pid>/fd (SECURITY.md, Isolation gvisor).
	ProtocolPipe func() (r, w *os.File, err error)
	// Early is a kernel process already started with these same options
	// (SpawnEarly, by the sandbox's stage 1): the session's first start
	// takes it instead of starting one; later starts start their own.
	Early *Early
}

func (o *Options) language() string {
	if o.Language == "" {
		return "python"
	}
	return o.Language
}

func (o *Options) env() []string {
	if o.Env == nil {
		return os.Environ()
	}
	return o.Env
}

func (o *Options) maxEvent() int {
	if o.MaxEventBytes <= 0 {
		return DefaultMaxEventBytes
	}
	return o.MaxEventBytes
}

func (o *Options) maxOutput() int64 {
	if o.MaxOutputBytes <= 0 {
		return DefaultMaxOutputBytes
	}
	return o.MaxOutputBytes
}

func (o *Options) killGrace() time.Duration {
	if o.KillGrace <= 0 {
		return DefaultKillGrace
	}
	return o.KillGrace
}

// Event types.
const (
	EventStdout             = "stdout"
	EventStderr             = "stderr"
	EventResult             = "result"
	EventError              = "error"
	EventNumberOfExecutions = "number_of_executions"
)

// Event is one item of an execution's output, in order.
type Event struct {
	Type string

	// stdout / stderr: a chunk and when Go read it. Python-level output
	// comes in whole lines (print("hi") is one "hi\n"), except a partial
	// line, written on flush(), before a result/error/child process, or
	// 50 ms after it was printed; child processes' output comes as read.
	Text      string
	Timestamp time.Time

	// result: a MIME bundle. Values are JSON: strings for text and base64
	// images, any JSON for application/json.
	Data         map[string]json.RawMessage
	Metadata     map[string]any
	IsMainResult bool

	// error: the traceback is one string showing the cell's lines.
	Name, Value, Traceback string

	// number_of_executions
	ExecutionCount int
}

// Request is one execution.
type Request struct {
	Code string
	// EnvVars are set for this execution only (os.environ and children),
	// then restored.
	EnvVars map[string]string
	// Timeout > 0 interrupts the execution after that long, and kills the
	// kernel if it has not stopped KillGrace later.
	Timeout time.Duration
	// Interrupt, when it closes during this execution, interrupts it (like
	// Interrupt, but only this execution: a late signal can't reach the next
	// one). Nil = never.
	Interrupt <-chan struct{}
}

// Outcome summarises how an execution ended.
type Outcome struct {
	// ExitCode is set when the cell raised SystemExit (sys.exit(n) → n,
	// sys.exit() → 0, sys.exit("msg") → 1 with msg on stderr).
	ExitCode *int
	// Error is true when an error event was sent.
	Error bool
	// Interrupted: Interrupt was called or the context was cancelled.
	Interrupted bool
	// TimedOut: Request.Timeout expired.
	TimedOut bool
	// KernelDied: the kernel process is gone (crash, kill, timeout kill);
	// the next execution starts a fresh one and says state was lost.
	KernelDied bool
	// ExecutionCount is the cell's number in this kernel process.
	ExecutionCount int
}

// Session is one context: a lazily started kernel process, restarted on the
// next use after it died. Executions and variable access are serialised.
type Session struct {
	opts Options
	sem  chan struct{} // held by the one running operation

	mu      sync.Mutex // guards k, closed, lost
	k       *kproc
	closed  bool
	lost    string // why earlier state was lost, told once to the next execution
	running atomic.Pointer[kproc]
	intr    atomic.Bool
	// imu orders Interrupt against the kernel's "start" acknowledgement: a
	// SIGINT that reaches the kernel before it has begun the cell would be
	// ignored (the main loop ignores SIGINT between cells), so it is held
	// back until the cell has started.
	imu     sync.Mutex
	started bool

	ids atomic.Uint64
}

// NewSession returns a Session; no process starts until it is needed.
func NewSession(opts Options) *Session {
	return &Session{opts: opts, sem: make(chan struct{}, 1)}
}

func (s *Session) lock(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Session) unlock() { <-s.sem }

// kernel returns the live kernel, starting one if needed (start=false: nil).
func (s *Session) kernel(start bool) (*kproc, string, error) {
	s.mu.Lock()
	if k := s.k; k != nil && !s.closed && !k.deadOrDone() && processGone(k.pid) {
		// Killed while idle (e.g. kill -9 -1 from another context) and
		// not yet noticed by its pump: wait for the pump, bounded, so the
		// next cell gets a fresh kernel and the "state lost" note instead
		// of dying on the dead one. The wait is without the lock: Pid,
		// Interrupt and Close must not stall behind it.
		s.mu.Unlock()
		select {
		case <-k.done:
		case <-time.After(2 * time.Second):
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if s.closed {
		return nil, "", ErrClosed
	}
	if k := s.k; k != nil {
		if !k.deadOrDone() {
			return k, "", nil
		}
		s.lost = k.dead.reason
		s.k = nil
	}
	if !start {
		return nil, "", nil
	}
	k, err := startKernel(&s.opts)
	if err != nil {
		return nil, "", err
	}
	s.k = k
	note := s.lost
	s.lost = ""
	return k, note, nil
}

// Pid is the kernel's process id, 0 when none runs.
func (s *Session) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.k == nil {
		return 0
	}
	select {
	case <-s.k.done:
		return 0
	default:
		return s.k.pid
	}
}

// Interrupt sends SIGINT to the running execution's process group (a
// KeyboardInterrupt in the cell; state is kept). False if nothing runs.
func (s *Session) Interrupt() bool {
	k := s.running.Load()
	if k == nil {
		return false
	}
	return s.interrupt(k)
}

// interrupt asks k's running cell to stop: now if it has started, else as
// soon as it acknowledges the start.
func (s *Session) interrupt(k *kproc) bool {
	s.imu.Lock()
	defer s.imu.Unlock()
	s.intr.Store(true)
	if !s.started {
		return true
	}
	return k.signal(syscall.SIGINT) == nil
}

// cellStarted records the kernel's "start" acknowledgement and delivers an
// interrupt that was asked for before it.
func (s *Session) cellStarted(k *kproc) {
	s.imu.Lock()
	defer s.imu.Unlock()
	s.started = true
	if s.intr.Load() {
		k.signal(syscall.SIGINT)
	}
}

// Restart kills the kernel (if any) and starts a fresh one. A kernel busy
// with a cell is killed first: the cell holds the execution lock until it
// ends, which for a stuck one is never; its Execute returns with
// KernelDied and frees the lock.
func (s *Session) Restart(ctx context.Context) error {
	s.mu.Lock()
	busy := s.k
	s.mu.Unlock()
	if busy != nil && s.running.Load() == busy {
		busy.kill("restarted")
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.unlock()
	s.mu.Lock()
	k := s.k
	s.k = nil
	s.lost = ""
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if k != nil {
		k.kill("restarted")
		<-k.done
	}
	_, _, err := s.kernel(true)
	return err
}

// Start starts the kernel now if none runs, so that the first Execute does
// not pay for the interpreter's start-up. Unlike Restart it never touches a
// kernel that is already there.
func (s *Session) Start(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.unlock()
	_, _, err := s.kernel(true)
	return err
}

// Warm starts the kernel if none runs and waits until it answers a command
// (Start returns once the process is spawned, before Python has imported
// the kernel). The command is a variable lookup of an invalid name, which
// touches nothing: no execution count, no namespace, no output.
func (s *Session) Warm(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.unlock()
	k, _, err := s.kernel(true)
	if err != nil {
		return err
	}
	_, err = s.roundTrip(ctx, k, []byte("get"), nil, nil)
	return err
}

// Close kills the kernel's process group, reaps it, and makes further calls
// fail with ErrClosed. A running Execute returns promptly.
func (s *Session) Close() error {
	s.mu.Lock()
	k := s.k
	s.k = nil
	s.closed = true
	s.mu.Unlock()
	if k != nil {
		k.kill("session closed")
		<-k.done
	}
	return nil
}

// Execute runs one cell, calling emit (from this goroutine) for each event
// in order; everything the cell printed is emitted before it returns. User
// errors are events; the error return is for infrastructure failures (no
// interpreter, closed session) and ctx ending (the cell is interrupted, and
// killed after KillGrace if it does not stop).
func (s *Session) Execute(ctx context.Context, req Request, emit func(Event)) (Outcome, error) {
	if emit == nil {
		emit = func(Event) {}
	}
	if err := s.lock(ctx); err != nil {
		return Outcome{}, err
	}
	defer s.unlock()
	defer s.running.Store(nil)
	var (
		out Outcome
		w   *waiter
		res waitResult
	)
	for attempt := 0; ; attempt++ {
		k, note, err := s.kernel(true)
		if err != nil {
			return Outcome{}, err
		}
		k.count++
		out = Outcome{ExecutionCount: k.count}
		emit(Event{Type: EventNumberOfExecutions, ExecutionCount: k.count})
		if note != "" {
			emit(Event{Type: EventStderr, Timestamp: time.Now(), Text: fmt.Sprintf(
				"[kernel restarted: the previous kernel died (%s); variables, imports and other state from earlier executions were lost]\n", note)})
		}
		id := s.ids.Add(1)
		fields := [][]byte{[]byte("exec"), []byte(strconv.FormatUint(id, 10)), []byte(strconv.Itoa(k.count)), []byte(req.Code)}
		for name, v := range req.EnvVars {
			fields = append(fields, []byte(name), []byte(v))
		}
		sk := k.attach()
		s.imu.Lock()
		s.intr.Store(false)
		s.started = false
		s.imu.Unlock()
		s.running.Store(k)
		k.send(encodeCommand(fields...))

		w = &waiter{s: s, k: k, sk: sk, id: id, emit: emit, maxOut: s.opts.maxOutput(), timeout: req.Timeout, exec: true, intrC: req.Interrupt}
		res = w.wait(ctx)
		k.detach(sk)
		s.imu.Lock()
		started := s.started
		s.imu.Unlock()
		// A kernel killed while idle (kill -9 -1 from another context) can
		// look alive until its pump notices. If it died before the cell
		// began, nothing of the cell ran: run it once on a fresh kernel,
		// which tells the user that earlier state was lost.
		if attempt == 0 && res.dead != nil && !started && w.sent == 0 && !w.sawError &&
			!w.cancelled && !w.timedOut && !s.isClosed() {
			continue
		}
		break
	}
	out.ExitCode = res.exit
	out.Error = w.sawError
	out.TimedOut = w.timedOut
	out.Interrupted = s.intr.Load() || w.cancelled
	out.KernelDied = res.dead != nil
	if w.dropped > 0 {
		w.emitText(2, fmt.Sprintf("[output truncated: %d bytes dropped after the first %d bytes of output]\n", w.dropped, w.maxOut), true)
	}
	if res.dead != nil && !w.cancelled {
		switch {
		case s.isClosed():
		case w.timedOut:
			// The TimeoutError event already says what happened.
		default:
			out.Error = true
			emit(Event{Type: EventError, Name: "KernelDied", Value: res.dead.reason,
				Traceback: "KernelDied: " + res.dead.reason + "\n"})
		}
	}
	if w.timedOut && !w.cancelled {
		out.Error = true
		msg := fmt.Sprintf("execution timed out after %s", req.Timeout)
		if res.dead != nil {
			msg += "; it did not stop when interrupted, so the kernel was killed and its state lost"
		}
		emit(Event{Type: EventError, Name: "TimeoutError", Value: msg, Traceback: "TimeoutError: " + msg + "\n"})
	}
	if s.isClosed() {
		return out, ErrClosed
	}
	if w.cancelled {
		return out, ctx.Err()
	}
	return out, nil
}

func (s *Session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// waiter consumes one command's items: output, events, and the final
// done/reply frame or the kernel's death.
type waiter struct {
	s       *Session
	k       *kproc
	sk      *sink
	id      uint64
	emit    func(Event)
	maxOut  int64
	timeout time.Duration
	exec    bool // an execution (acknowledges its start), not a get/set
	intrC   <-chan struct{}

	sent, dropped int64
	sawError      bool
	timedOut      bool
	cancelled     bool
}

type waitResult struct {
	exit  *int
	reply *wireFrame
	dead  *death
}

func (w *waiter) emitText(stream int, text string, force bool) {
	if w.cancelled {
		return
	}
	typ := EventStdout
	if stream == 2 {
		typ = EventStderr
	}
	if !force {
		if room := w.maxOut - w.sent; int64(len(text)) > room {
			if room < 0 {
				room = 0
			}
			w.dropped += int64(len(text)) - room
			text = text[:room]
		}
		w.sent += int64(len(text))
		if text == "" {
			return
		}
	}
	w.emit(Event{Type: typ, Text: text, Timestamp: time.Now()})
}

func (w *waiter) wait(ctx context.Context) waitResult {
	var timeoutC, graceC <-chan time.Time
	if w.timeout > 0 {
		t := time.NewTimer(w.timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	done := ctx.Done()
	// The pump closes k.done only after its last delivery, so once it is
	// closed the sink holds all there will ever be: drain it and report the
	// death even if the itemDead went to no sink (e.g. the kernel died just
	// before this sink was attached). Without this the wait had no bound.
	kdone := w.k.done
	stop := func() {
		if w.exec {
			w.s.interrupt(w.k)
		} else {
			w.k.signal(syscall.SIGINT)
		}
		g := time.NewTimer(w.s.opts.killGrace())
		graceC = g.C
	}
	for {
		select {
		case it := <-w.sk.ch:
			if res, ok := w.handle(it); ok {
				return res
			}
		case <-kdone:
			for {
				select {
				case it := <-w.sk.ch:
					if res, ok := w.handle(it); ok {
						return res
					}
				default:
					w.k.sinkMu.Lock()
					d := w.k.dead
					w.k.sinkMu.Unlock()
					return waitResult{dead: d}
				}
			}
		case <-timeoutC:
			timeoutC = nil
			w.timedOut = true
			if graceC == nil {
				stop()
			}
		case <-w.intrC:
			w.intrC = nil
			w.s.interrupt(w.k)
		case <-done:
			done = nil
			w.cancelled = true
			if graceC == nil {
				stop()
			}
		case <-graceC:
			graceC = nil
			w.k.kill(fmt.Sprintf("the kernel was killed because an execution did not stop within %s of being interrupted", w.s.opts.killGrace()))
		}
	}
}

// handle processes one item; ok is true when it ends the wait.
func (w *waiter) handle(it item) (res waitResult, ok bool) {
	switch it.kind {
	case itemText:
		if w.cancelled {
			return
		}
		typ := EventStdout
		if it.stream == 2 {
			typ = EventStderr
		}
		text := it.text
		if room := w.maxOut - w.sent; int64(len(text)) > room {
			if room < 0 {
				room = 0
			}
			w.dropped += int64(len(text)) - room
			text = text[:room]
		}
		w.sent += int64(len(text))
		if len(text) > 0 {
			w.emit(Event{Type: typ, Text: string(text), Timestamp: it.at})
		}
	case itemDead:
		return waitResult{dead: it.dead}, true
	case itemFrame:
		f := it.frame
		switch f.T {
		case "start":
			if f.ID == w.id {
				w.s.cellStarted(w.k)
			}
		case "done":
			if f.ID == w.id {
				return waitResult{exit: f.Exit}, true
			}
		case "reply":
			if f.ID == w.id {
				return waitResult{reply: f}, true
			}
		case "display":
			if !w.cancelled {
				w.emit(Event{Type: EventResult, Data: f.Data, Metadata: f.MD, IsMainResult: f.Main})
			}
		case "error":
			if w.timedOut && f.Name == "KeyboardInterrupt" {
				return // reported as TimeoutError instead
			}
			w.sawError = true
			if !w.cancelled {
				w.emit(Event{Type: EventError, Name: f.Name, Value: f.Value, Traceback: f.TB})
			}
		}
	}
	return
}

// roundTrip runs a get/set command and returns its reply frame.
func (s *Session) roundTrip(ctx context.Context, k *kproc, fields ...[]byte) (*wireFrame, error) {
	id := s.ids.Add(1)
	fields[1] = []byte(strconv.FormatUint(id, 10))
	sk := k.attach()
	defer k.detach(sk)
	k.send(encodeCommand(fields...))
	w := &waiter{s: s, k: k, sk: sk, id: id, emit: func(Event) {}, maxOut: 0}
	res := w.wait(ctx)
	switch {
	case w.cancelled:
		return nil, ctx.Err()
	case res.dead != nil:
		if s.isClosed() {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("%w: %s", ErrKernelDied, res.dead.reason)
	case res.reply == nil:
		return nil, fmt.Errorf("%w: no reply", errProtocol)
	}
	return res.reply, nil
}

func replyError(f *wireFrame, name string) error {
	switch {
	case f.Err == "":
		return nil
	case f.Err == "not_found":
		return fmt.Errorf("%w: %q", ErrVariableNotFound, name)
	case f.Err == "invalid_name":
		return fmt.Errorf("%w: %q is not a Python identifier", ErrInvalidName, name)
	case len(f.Err) > 11 && f.Err[:11] == "unsendable:":
		return fmt.Errorf("%w: %s", ErrUnsendable, f.Err[12:])
	}
	return fmt.Errorf("kernel: variable %q: %s", name, f.Err)
}

// GetVariable returns a global of the user namespace as JSON. A value JSON
// can't encode comes back as its repr() (a JSON string) with isRepr true.
// It waits for a running execution to finish (honouring ctx). Without a live
// kernel there are no variables: ErrVariableNotFound.
func (s *Session) GetVariable(ctx context.Context, name string) (value json.RawMessage, isRepr bool, err error) {
	if err := s.lock(ctx); err != nil {
		return nil, false, err
	}
	defer s.unlock()
	if !validName(name) {
		return nil, false, fmt.Errorf("%w: %q is not a Python identifier", ErrInvalidName, name)
	}
	k, _, err := s.kernel(false)
	if err != nil {
		return nil, false, err
	}
	if k == nil {
		return nil, false, fmt.Errorf("%w: %q (no kernel is running)", ErrVariableNotFound, name)
	}
	f, err := s.roundTrip(ctx, k, []byte("get"), nil, []byte(name))
	if err != nil {
		return nil, false, err
	}
	if err := replyError(f, name); err != nil {
		return nil, false, err
	}
	if f.Repr != nil {
		b, _ := json.Marshal(*f.Repr)
		return b, true, nil
	}
	if len(f.JSON) == 0 {
		return nil, false, fmt.Errorf("%w: empty variable reply", errProtocol)
	}
	return f.JSON, false, nil
}

// SetVariable assigns a global in the user namespace from JSON (starting the
// kernel if needed). Invalid JSON is refused with ErrUnsendable.
func (s *Session) SetVariable(ctx context.Context, name string, value json.RawMessage) error {
	if !json.Valid(value) {
		return fmt.Errorf("%w: the value is not valid JSON", ErrUnsendable)
	}
	return s.setVariable(ctx, name, value, "json")
}

// SetVariableBytes assigns a global in the user namespace a bytes object
// holding value.
func (s *Session) SetVariableBytes(ctx context.Context, name string, value []byte) error {
	return s.setVariable(ctx, name, value, "bytes")
}

func (s *Session) setVariable(ctx context.Context, name string, value []byte, kind string) error {
	if !validName(name) {
		return fmt.Errorf("%w: %q is not a Python identifier", ErrInvalidName, name)
	}
	if len(value) > s.opts.maxEvent() {
		return fmt.Errorf("%w: the value is %d bytes, over the limit of %d", ErrUnsendable, len(value), s.opts.maxEvent())
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.unlock()
	k, _, err := s.kernel(true)
	if err != nil {
		return err
	}
	f, err := s.roundTrip(ctx, k, []byte("set"), nil, []byte(name), value, []byte(kind))
	if err != nil {
		return err
	}
	return replyError(f, name)
}

// validName is a quick pre-check; the kernel applies Python's exact rules
// (str.isidentifier, keywords) for non-ASCII names.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9':
			if i == 0 {
				return false
			}
		case r < 0x80:
			return false
		}
	}
	return true
}
