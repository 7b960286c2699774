package envd

// Filesystem RPCs for a user the agent can't act as itself (the local
// variant's root: the agent runs as uid 1000 with no capability, so it can't
// setuid, and root there has no capability either, so only a process of
// root's own uid has root's file permissions). Such an RPC runs in a helper
// process started as that user — this binary again, through the sandbox's
// sudo (Options.Sudo), which asks the sandbox's root broker — and the helper
// runs the very same handler code with its own credentials. The helper is no
// more than `sudo sh -c …` is: root of the sandbox's nested user namespace,
// no capability, no_new_privs, the sandbox's seccomp filter, its mount
// namespace. What it answers is treated as hostile (root in the sandbox may
// write into its pipes): every line is bounded and parsed, nothing else.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/code-sandboxes/code-sandboxes/internal/cpupin"
	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
)

// FSHelperArg is the argument that makes this binary the filesystem helper
// (with FSHelperEnv set): see IsFSHelper.
const (
	FSHelperArg = "--code-sandboxes-envd-fs-helper"
	FSHelperEnv = "CODE_SANDBOXES_ENVD_FS_HELPER"
)

// Bounds on what crosses the helper's pipes.
const (
	maxHelperRequest = 1 << 20
	// maxHelperLine bounds one answer line: a ListDir of a large tree is
	// one line (the direct path has no bound of its own but memory).
	maxHelperLine = 64 << 20
	// helperTimeout bounds a unary call (a listing of a huge tree, a
	// removal of one); watches live as long as their stream.
	helperTimeout = 5 * time.Minute
)

type helperRequest struct {
	Method  string          `json:"method"`
	Msg     json.RawMessage `json:"msg"`
	User    User            `json:"user"`
	Workdir string          `json:"workdir,omitempty"`
}

// helperAnswer is one line from the helper: a response (Msg), a watch event
// (Event), or the end with an error (Code, Error) or without (End).
type helperAnswer struct {
	Msg   json.RawMessage `json:"msg,omitempty"`
	Event json.RawMessage `json:"event,omitempty"`
	Start bool            `json:"start,omitempty"`
	End   bool            `json:"end,omitempty"`
	Code  string          `json:"code,omitempty"`
	Error string          `json:"error,omitempty"`
}

// IsFSHelper reports whether this process was started as the filesystem
// helper. Call it first thing in main (before isolate.IsSudo: the helper is
// the sudo binary run by the broker).
func IsFSHelper() bool {
	return len(os.Args) == 2 && os.Args[1] == FSHelperArg && os.Getenv(FSHelperEnv) == "1"
}

// FSHelperMain runs one filesystem RPC read from stdin and writes its
// answer lines to stdout; returns the exit status.
func FSHelperMain() int {
	os.Unsetenv(FSHelperEnv)
	var req helperRequest
	if err := json.NewDecoder(io.LimitReader(os.Stdin, maxHelperRequest)).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "envd fs helper: request:", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The agent closing our stdin (or going away) ends a watch.
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	out := bufio.NewWriter(os.Stdout)
	write := func(a helperAnswer) error {
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		out.Write(append(b, '\n'))
		return out.Flush()
	}
	if err := runHelper(ctx, req, write); err != nil {
		var ce *connect.Error
		a := helperAnswer{Code: connect.CodeInternal.String(), Error: err.Error()}
		if errors.As(err, &ce) {
			a = helperAnswer{Code: ce.Code().String(), Error: ce.Message()}
		}
		if write(a) != nil {
			return 1
		}
		return 0
	}
	if write(helperAnswer{End: true}) != nil {
		return 1
	}
	return 0
}

func runHelper(ctx context.Context, req helperRequest, write func(helperAnswer) error) error {
	u := req.User
	// Our own ids: the user's as this process's user namespace numbers them.
	u.UID, u.GID = uint32(os.Geteuid()), uint32(os.Getegid())
	s := NewFilesystemService(Options{
		LookupUser:     func(string) (User, error) { return u, nil },
		DefaultWorkdir: req.Workdir,
	})
	defer s.Close()
	unary := func(in proto.Message, call func() (proto.Message, error)) error {
		if err := protojson.Unmarshal(req.Msg, in); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		resp, err := call()
		if err != nil {
			return err
		}
		b, err := protojson.Marshal(resp)
		if err != nil {
			return err
		}
		return write(helperAnswer{Msg: b})
	}
	switch req.Method {
	case "Stat":
		in := &fspb.StatRequest{}
		return unary(in, func() (proto.Message, error) {
			r, err := s.Stat(ctx, connect.NewRequest(in))
			return msgOf(r, err)
		})
	case "MakeDir":
		in := &fspb.MakeDirRequest{}
		return unary(in, func() (proto.Message, error) {
			r, err := s.MakeDir(ctx, connect.NewRequest(in))
			return msgOf(r, err)
		})
	case "Move":
		in := &fspb.MoveRequest{}
		return unary(in, func() (proto.Message, error) {
			r, err := s.Move(ctx, connect.NewRequest(in))
			return msgOf(r, err)
		})
	case "ListDir":
		in := &fspb.ListDirRequest{}
		return unary(in, func() (proto.Message, error) {
			r, err := s.ListDir(ctx, connect.NewRequest(in))
			return msgOf(r, err)
		})
	case "Remove":
		in := &fspb.RemoveRequest{}
		return unary(in, func() (proto.Message, error) {
			r, err := s.Remove(ctx, connect.NewRequest(in))
			return msgOf(r, err)
		})
	case "Watch":
		var wp helperWatch
		if err := json.Unmarshal(req.Msg, &wp); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		// The agent's side queues (and drops, for polled watchers); here
		// the pipe is the backpressure.
		w, err := s.startWatch(nil, watchParams{wp.Path, wp.Recursive, wp.IncludeEntry, wp.AllowNetwork}, 256, false)
		if err != nil {
			return err
		}
		defer w.close()
		if err := write(helperAnswer{Start: true}); err != nil {
			return err
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case ev, ok := <-w.events:
				if !ok {
					return w.err()
				}
				b, err := protojson.Marshal(ev)
				if err != nil {
					return err
				}
				if err := write(helperAnswer{Event: b}); err != nil {
					return err
				}
			}
		}
	}
	return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("unknown method %q", req.Method))
}

type helperWatch struct {
	Path         string `json:"path"`
	Recursive    bool   `json:"recursive"`
	IncludeEntry bool   `json:"include_entry"`
	AllowNetwork bool   `json:"allow_network"`
}

func msgOf[T any](r *connect.Response[T], err error) (proto.Message, error) {
	if err != nil {
		return nil, err
	}
	m, ok := any(r.Msg).(proto.Message)
	if !ok {
		return nil, errors.New("not a proto message")
	}
	return m, nil
}

// alien: u is a user the agent can't act as itself, whose filesystem RPCs
// run in a helper (Options.Sudo).
func (s *FilesystemService) alien(u User) bool {
	return s.opts.Sudo != "" && !asRoot() && u.UID != uint32(os.Geteuid())
}

// helperCmd starts the helper as u through the sandbox's sudo; the caller
// owns the returned process (Wait) and its pipes.
// stderr is sudo's and the helper's (first 4 KiB), to read once cmd is
// waited for.
func (s *FilesystemService) helperCmd(ctx context.Context, u User, method string, msg []byte) (cmd *exec.Cmd, stdout io.ReadCloser, stdin io.WriteCloser, stderr *bytes.Buffer, err error) {
	req, err := json.Marshal(helperRequest{Method: method, Msg: msg, User: User{Name: u.Name, Home: u.Home}, Workdir: s.opts.DefaultWorkdir})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	// The helper is the sudo binary itself (this program), run by the
	// broker with FSHelperArg; sudo changes to / as root.
	cmd = exec.CommandContext(ctx, s.opts.Sudo, "-u", u.Name, "-D", "/", "--", s.opts.Sudo, FSHelperArg)
	cmd.Args[0] = "sudo"
	cmd.Dir = "/"
	cmd.Env = []string{FSHelperEnv + "=1", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	stderr = &bytes.Buffer{}
	cmd.Stderr = &limitedBuffer{b: stderr, max: 4096}
	cmd.WaitDelay = time.Second
	// Killing sudo is enough: the broker kills what it started for sudo
	// once sudo's connection closes.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	if stdin, err = cmd.StdinPipe(); err != nil {
		return nil, nil, nil, nil, err
	}
	if stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, nil, nil, nil, err
	}
	if err := cpupin.Start(cmd); err != nil {
		return nil, nil, nil, nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start the filesystem helper as %s: %w", u.Name, err))
	}
	if _, err := stdin.Write(append(req, '\n')); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, nil, nil, connect.NewError(connect.CodeInternal, fmt.Errorf("filesystem helper as %s: %w (%s)", u.Name, err, strings.TrimSpace(stderr.String())))
	}
	return cmd, stdout, stdin, stderr, nil
}

// viaHelper runs a unary RPC in the helper as u and decodes its answer
// into out.
func (s *FilesystemService) viaHelper(ctx context.Context, u User, method string, in, out proto.Message) error {
	msg, err := protojson.Marshal(in)
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	ctx, cancel := context.WithTimeout(ctx, helperTimeout)
	defer cancel()
	cmd, stdout, stdin, stderr, err := s.helperCmd(ctx, u, method, msg)
	if err != nil {
		return err
	}
	waited := false
	wait := func() {
		// A helper that doesn't exit soon after its answer (root may stop
		// it) is killed rather than waited for.
		stdin.Close()
		t := time.AfterFunc(5*time.Second, cancel)
		cmd.Wait()
		t.Stop()
		waited = true
	}
	defer func() {
		if !waited {
			wait()
		}
	}()
	r := bufio.NewReader(stdout)
	a, err := readAnswer(r)
	if err != nil {
		if ctx.Err() != nil {
			return streamCtxErr(ctx)
		}
		wait() // for sudo's reason (a broker gone, say)
		return connect.NewError(connect.CodeInternal, fmt.Errorf("filesystem helper as %s: %w (%s)", u.Name, err, strings.TrimSpace(stderr.String())))
	}
	if a.Code != "" {
		return answerError(a)
	}
	if len(a.Msg) == 0 {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("filesystem helper as %s: no answer", u.Name))
	}
	if err := protojson.Unmarshal(a.Msg, out); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("filesystem helper as %s: %w", u.Name, err))
	}
	return nil
}

// readAnswer reads one bounded line.
func readAnswer(r *bufio.Reader) (helperAnswer, error) {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return helperAnswer{}, err
		}
		if len(line)+len(chunk) > maxHelperLine {
			return helperAnswer{}, fmt.Errorf("answer over %d bytes", maxHelperLine)
		}
		line = append(line, chunk...)
		if !isPrefix {
			break
		}
	}
	var a helperAnswer
	if err := json.Unmarshal(line, &a); err != nil {
		return helperAnswer{}, fmt.Errorf("malformed answer: %w", err)
	}
	return a, nil
}

func answerError(a helperAnswer) error {
	var code connect.Code
	if err := code.UnmarshalText([]byte(a.Code)); err != nil {
		code = connect.CodeInternal
	}
	return connect.NewError(code, errors.New(a.Error))
}

// helperWatcher is a dirWatcher fed by a helper watching as u.
func (s *FilesystemService) helperWatcher(u User, wp watchParams, queue int, dropWhenFull bool) (*dirWatcher, error) {
	msg, err := json.Marshal(helperWatch{wp.path, wp.recursive, wp.includeEntry, wp.allowNetwork})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd, stdout, stdin, stderr, err := s.helperCmd(ctx, u, "Watch", msg)
	if err != nil {
		cancel()
		return nil, err
	}
	stop := func() {
		cancel()
		stdin.Close()
	}
	r := bufio.NewReader(stdout)
	fail := func(err error) (*dirWatcher, error) {
		stop()
		cmd.Wait()
		return nil, err
	}
	// The first line: the watch started, or why not (synchronously, as
	// for the agent's own watches).
	type first struct {
		a   helperAnswer
		err error
	}
	ch := make(chan first, 1)
	go func() {
		a, err := readAnswer(r)
		ch <- first{a, err}
	}()
	var f first
	select {
	case f = <-ch:
	case <-time.After(time.Minute):
		return fail(connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("filesystem helper as %s did not start the watch", u.Name)))
	}
	switch {
	case f.err != nil:
		stop()
		cmd.Wait() // for sudo's reason (a broker gone, say)
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("filesystem helper as %s: %w (%s)", u.Name, f.err, strings.TrimSpace(stderr.String())))
	case f.a.Code != "":
		return fail(answerError(f.a))
	case !f.a.Start:
		return fail(connect.NewError(connect.CodeInternal, fmt.Errorf("filesystem helper as %s: unexpected answer", u.Name)))
	}
	w := &dirWatcher{
		root: wp.path, recursive: wp.recursive, includeEntry: wp.includeEntry, dropWhenFull: dropWhenFull,
		events: make(chan *fspb.FilesystemEvent, queue),
		done:   make(chan struct{}),
		stop:   stop,
	}
	go func() {
		defer close(w.events)
		defer cmd.Wait()
		for {
			a, err := readAnswer(r)
			if err != nil || a.Code != "" || a.End {
				select {
				case <-w.done: // closed by us
				default:
					if a.Code != "" {
						err = answerError(a)
					}
					if err != nil && !errors.Is(err, io.EOF) {
						w.errMu.Lock()
						w.errVal = err
						w.errMu.Unlock()
					}
				}
				stop()
				return
			}
			ev := &fspb.FilesystemEvent{}
			if len(a.Event) == 0 || protojson.Unmarshal(a.Event, ev) != nil {
				continue
			}
			if !w.emit(ev) {
				stop()
				return
			}
		}
	}()
	return w, nil
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		if len(p) > room {
			l.b.Write(p[:room])
		} else {
			l.b.Write(p)
		}
	}
	return len(p), nil
}

// viaHelperFor runs a unary RPC in the helper when the request's user is
// alien (ok true), with Resp the response type.
func viaHelperFor[Resp any, PResp interface {
	*Resp
	proto.Message
}](ctx context.Context, s *FilesystemService, h http.Header, method string, in proto.Message) (*connect.Response[Resp], bool, error) {
	u, err := s.opts.connectUser(h)
	if err != nil || !s.alien(u) {
		return nil, false, nil // the handler answers (its own user error)
	}
	out := PResp(new(Resp))
	if err := s.viaHelper(ctx, u, method, in, out); err != nil {
		return nil, true, err
	}
	return connect.NewResponse((*Resp)(out)), true, nil
}
