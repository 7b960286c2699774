package envd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/cpupin"
	pb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/process/processconnect"
	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
)

// defaultPath is PATH for processes when the agent itself has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ProcessService implements process.Process.
type ProcessService struct {
	opts Options

	mu     sync.Mutex
	procs  map[uint32]*proc
	closed bool
	wg     sync.WaitGroup // one per running process (its waiter)
}

var _ processconnect.ProcessHandler = (*ProcessService)(nil)

// NewProcessService returns the process service.
func NewProcessService(opts Options) *ProcessService {
	return &ProcessService{opts: opts, procs: map[uint32]*proc{}}
}

// Handler returns the mount path and HTTP handler of the service.
func (s *ProcessService) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return processconnect.NewProcessHandler(s, opts...)
}

// Close kills every process group started by the service and waits (up to
// 5 s) until they are reaped. Later Starts fail with unavailable.
func (s *ProcessService) Close() {
	s.mu.Lock()
	s.closed = true
	ps := slices.Collect(maps.Values(s.procs))
	s.mu.Unlock()
	for _, p := range ps {
		_ = p.signal(unix.SIGKILL)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

func (s *ProcessService) stall() time.Duration {
	if s.opts.StallTimeout > 0 {
		return s.opts.StallTimeout
	}
	return DefaultStallTimeout
}

// find resolves a selector to a running process.
func (s *ProcessService) find(sel *pb.ProcessSelector) (*proc, error) {
	if sel == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector (pid or tag) is required"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p, ok := s.procs[v.Pid]; ok {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", v.Pid))
	case *pb.ProcessSelector_Tag:
		// Lowest pid first so that a duplicated tag selects deterministically.
		for _, pid := range slices.Sorted(maps.Keys(s.procs)) {
			if p := s.procs[pid]; p.info.GetTag() == v.Tag && p.info.Tag != nil {
				return p, nil
			}
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", v.Tag))
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector (pid or tag) is required"))
	}
}

// buildEnv returns PATH, HOME, USER, LOGNAME, then the global env, then the
// request's envs, later ones overriding earlier ones (envd's order).
func (s *ProcessService) buildEnv(u User, req map[string]string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	env := map[string]string{"PATH": path, "HOME": u.Home, "USER": u.Name, "LOGNAME": u.Name}
	maps.Copy(env, s.opts.globalEnv())
	maps.Copy(env, req)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

func (s *ProcessService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	u, err := s.opts.connectUser(req.Header())
	if err != nil {
		return err
	}
	cfg := req.Msg.GetProcess()
	if cfg == nil || cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	cwd, err := resolvePath(cfg.GetCwd(), u, s.opts.DefaultWorkdir)
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid cwd: %w", err))
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid cwd %s: %w", cwd, err))
	}

	cmd := exec.Command(cfg.GetCmd(), cfg.GetArgs()...)
	cmd.Dir = cwd
	cmd.Env = s.buildEnv(u, cfg.GetEnvs())
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if asRoot() && u.UID != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID}
	} else if !asRoot() && u.UID != uint32(os.Geteuid()) && s.opts.Sudo != "" && cmd.Err == nil {
		// The sudo relays signals to the command and exits as it did.
		// It changes to the directory itself: the user may not enter root's.
		cmd.Args = append([]string{"sudo", "-u", u.Name, "-D", cwd, "--", cmd.Path}, cmd.Args[1:]...)
		cmd.Path = s.opts.Sudo
		cmd.Dir = "/"
	}

	p := &proc{
		cmd:   cmd,
		stall: s.stall(),
		subs:  map[*subscriber]struct{}{},
	}
	var readers []func()
	var closeAfterStart []*os.File
	cleanup := func() {
		for _, f := range closeAfterStart {
			f.Close()
		}
	}

	if ptyReq := req.Msg.GetPty(); ptyReq != nil {
		master, slave, err := openPTY()
		if err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("allocate pty: %w", err))
		}
		if sz := ptyReq.GetSize(); sz != nil {
			_ = resizePTY(master, sz.GetCols(), sz.GetRows())
		}
		if asRoot() {
			_ = slave.Chown(int(u.UID), int(u.GID)) // the user's shell opens /dev/tty
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		// A new session with the PTY as controlling terminal: job control and
		// ^C work, and the session leader's pid is the process group.
		cmd.SysProcAttr.Setsid = true
		cmd.SysProcAttr.Setctty = true
		cmd.SysProcAttr.Ctty = 0
		p.pty = master
		p.readEnds = []*os.File{master}
		closeAfterStart = append(closeAfterStart, slave)
		readers = append(readers, func() {
			p.readOutput(master, func(b []byte) *pb.ProcessEvent_DataEvent {
				return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: b}}
			})
		})
	} else {
		cmd.SysProcAttr.Setpgid = true
		outR, outW, err := os.Pipe()
		if err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			outR.Close()
			outW.Close()
			return connect.NewError(connect.CodeInternal, err)
		}
		// *os.File std streams are handed to the child as is: no copying
		// goroutines inside exec, so Wait returns when the process exits.
		cmd.Stdout, cmd.Stderr = outW, errW
		closeAfterStart = append(closeAfterStart, outW, errW)
		if req.Msg.Stdin == nil || req.Msg.GetStdin() {
			inR, inW, err := os.Pipe()
			if err != nil {
				outR.Close()
				errR.Close()
				cleanup()
				return connect.NewError(connect.CodeInternal, err)
			}
			cmd.Stdin = inR
			p.stdin = inW
			closeAfterStart = append(closeAfterStart, inR)
		}
		p.readEnds = []*os.File{outR, errR}
		readers = append(readers,
			func() {
				p.readOutput(outR, func(b []byte) *pb.ProcessEvent_DataEvent {
					return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
				})
			},
			func() {
				p.readOutput(errR, func(b []byte) *pb.ProcessEvent_DataEvent {
					return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
				})
			})
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cleanup()
		p.abort()
		return connect.NewError(connect.CodeUnavailable, errors.New("process service is shutting down"))
	}
	err = cpupin.Start(cmd) // the agent's full CPU set, not its one CPU
	cleanup()
	if err != nil {
		s.mu.Unlock()
		p.abort()
		return startError(cfg.GetCmd(), err)
	}
	p.pid = uint32(cmd.Process.Pid)
	p.pgid = cmd.Process.Pid
	// Under a memory limit a command, not the agent, is the OOM victim.
	_ = procstat.SetOOMScoreAdj(cmd.Process.Pid, procstat.OOMScoreUserCode)
	p.info = &pb.ProcessInfo{Config: cfg, Pid: p.pid, Tag: req.Msg.Tag}
	// Subscribe before any output is read so the caller sees all of it.
	sub := newSubscriber()
	p.subs[sub] = struct{}{}
	s.procs[p.pid] = p
	s.wg.Add(1)
	s.mu.Unlock()

	// The request deadline (Connect-Timeout-Ms) is the process's lifetime
	// limit, as in envd; the client going away is not.
	var killTimer *time.Timer
	if dl, ok := ctx.Deadline(); ok {
		killTimer = time.AfterFunc(time.Until(dl), func() { _ = p.signal(unix.SIGKILL) })
	}
	var rwg sync.WaitGroup
	for _, r := range readers {
		rwg.Go(r)
	}
	go s.wait(p, &rwg, killTimer)

	if err := stream.Send(&pb.StartResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: p.pid}}}}); err != nil {
		p.unsubscribe(sub)
		return err
	}
	return p.pump(ctx, sub, keepaliveInterval(req.Header(), s.opts.keepalive()), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

// wait reaps the process, lets the readers drain, publishes the end event
// and removes the process from the table.
func (s *ProcessService) wait(p *proc, readers *sync.WaitGroup, killTimer *time.Timer) {
	defer s.wg.Done()
	waitErr := p.cmd.Wait()
	if killTimer != nil {
		killTimer.Stop()
	}
	// Readers get EOF unless a background child still holds the output
	// open; then stop waiting for it shortly after the exit.
	for _, f := range p.readEnds {
		_ = f.SetReadDeadline(time.Now().Add(exitDrainGrace))
	}
	readers.Wait()
	p.closeInputs()
	s.mu.Lock()
	delete(s.procs, p.pid)
	s.mu.Unlock()
	p.finish(endEvent(p.cmd.ProcessState, waitErr))
}

// closeInputs closes the stdin pipe. (The PTY master is closed by its
// reader, after the last output was read.)
func (p *proc) closeInputs() {
	p.ioMu.Lock()
	defer p.ioMu.Unlock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
}

// abort releases the parent's ends of a process that failed to start (its
// readers, which would close them, never run).
func (p *proc) abort() {
	p.closeInputs()
	for _, f := range p.readEnds {
		f.Close()
	}
}

func startError(cmd string, err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cannot start %q: %w", cmd, err))
	case errors.Is(err, fs.ErrPermission):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("cannot start %q: %w", cmd, err))
	default:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("cannot start %q: %w", cmd, err))
	}
}

func (s *ProcessService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	if _, err := s.opts.connectUser(req.Header()); err != nil {
		return err
	}
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub := newSubscriber()
	p.subscribe(sub)
	if err := stream.Send(&pb.ConnectResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: p.pid}}}}); err != nil {
		p.unsubscribe(sub)
		return err
	}
	return p.pump(ctx, sub, keepaliveInterval(req.Header(), s.opts.keepalive()), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

func (s *ProcessService) List(_ context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	if _, err := s.opts.connectUser(req.Header()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	infos := make([]*pb.ProcessInfo, 0, len(s.procs))
	for _, pid := range slices.Sorted(maps.Keys(s.procs)) {
		infos = append(infos, s.procs[pid].info)
	}
	s.mu.Unlock()
	return connect.NewResponse(&pb.ListResponse{Processes: infos}), nil
}

func (s *ProcessService) sendInput(ctx context.Context, p *proc, in *pb.ProcessInput) error {
	p.ioMu.Lock()
	defer p.ioMu.Unlock()
	var f *os.File
	var data []byte
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		data = v.Stdin
		switch {
		case p.pty != nil:
			f = p.pty // a PTY process's stdin is the terminal
		case p.stdin != nil:
			f = p.stdin
		default:
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no open stdin (started with stdin=false, or stdin was closed)", p.pid))
		}
	case *pb.ProcessInput_Pty:
		data = v.Pty
		if p.pty == nil {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no pty", p.pid))
		}
		f = p.pty
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input (stdin or pty) is required"))
	}
	if err := p.writeInput(ctx, f, data); err != nil {
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("process %d is not reading its input: %w", p.pid, err))
		case errors.Is(err, syscall.EPIPE), errors.Is(err, os.ErrClosed), errors.Is(err, syscall.EIO):
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d input is closed: %w", p.pid, err))
		default:
			return connect.NewError(connect.CodeInternal, fmt.Errorf("write input of process %d: %w", p.pid, err))
		}
	}
	return nil
}

func (s *ProcessService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	if _, err := s.opts.connectUser(req.Header()); err != nil {
		return nil, err
	}
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := s.sendInput(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func (s *ProcessService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	if _, err := s.opts.connectUser(stream.RequestHeader()); err != nil {
		return nil, err
	}
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := s.find(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the first StreamInput message must be start{process}"))
			}
			if err := s.sendInput(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Keepalive:
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func (s *ProcessService) SendSignal(_ context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	if _, err := s.opts.connectUser(req.Header()); err != nil {
		return nil, err
	}
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig unix.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = unix.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = unix.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported signal %v", req.Msg.GetSignal()))
	}
	if err := p.signal(sig); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("signal process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (s *ProcessService) CloseStdin(_ context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	if _, err := s.opts.connectUser(req.Header()); err != nil {
		return nil, err
	}
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if p.pty != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d uses a pty: send EOT (0x04) as pty input instead", p.pid))
	}
	p.ioMu.Lock()
	defer p.ioMu.Unlock()
	if p.stdin == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no open stdin", p.pid))
	}
	err = p.stdin.Close()
	p.stdin = nil
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

func (s *ProcessService) Update(_ context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	if _, err := s.opts.connectUser(req.Header()); err != nil {
		return nil, err
	}
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if sz := req.Msg.GetPty().GetSize(); sz != nil {
		if p.pty == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no pty", p.pid))
		}
		if err := resizePTY(p.pty, sz.GetCols(), sz.GetRows()); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("resize pty of process %d: %w", p.pid, err))
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}
