package envd

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
)

type procResult struct {
	pid            uint32
	stdout, stderr bytes.Buffer
	pty            bytes.Buffer
	end            *pb.ProcessEvent_EndEvent
	keepalives     int
	err            error
	order          []string
}

// stream is what Start and Connect client streams have in common.
type stream interface {
	Receive() bool
	Err() error
}

func event[T interface{ GetEvent() *pb.ProcessEvent }](msg T) *pb.ProcessEvent { return msg.GetEvent() }

// collect reads a process stream to its end, checking that start comes
// first and end last.
func collect(t *testing.T, s stream, msg func() *pb.ProcessEvent) *procResult {
	t.Helper()
	return collectFrom(t, s, msg, &procResult{})
}

// collectRest reads the rest of a stream whose start event was consumed.
func collectRest(t *testing.T, s stream, msg func() *pb.ProcessEvent) *procResult {
	t.Helper()
	return collectFrom(t, s, msg, &procResult{order: []string{"start"}})
}

func collectFrom(t *testing.T, s stream, msg func() *pb.ProcessEvent, r *procResult) *procResult {
	t.Helper()
	for s.Receive() {
		ev := msg()
		switch e := ev.GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			if len(r.order) != 0 {
				t.Errorf("start event after %v", r.order)
			}
			r.pid = e.Start.GetPid()
			r.order = append(r.order, "start")
		case *pb.ProcessEvent_Data:
			r.stdout.Write(e.Data.GetStdout())
			r.stderr.Write(e.Data.GetStderr())
			r.pty.Write(e.Data.GetPty())
			if n := len(e.Data.GetStdout()) + len(e.Data.GetStderr()) + len(e.Data.GetPty()); n > maxChunk {
				t.Errorf("data event of %d bytes exceeds %d", n, maxChunk)
			}
			r.order = append(r.order, "data")
		case *pb.ProcessEvent_Keepalive:
			r.keepalives++
			r.order = append(r.order, "keepalive")
		case *pb.ProcessEvent_End:
			r.end = e.End
			r.order = append(r.order, "end")
		}
		if r.end != nil && len(r.order) > 0 && r.order[len(r.order)-1] != "end" {
			t.Errorf("event after end: %v", r.order)
		}
	}
	r.err = s.Err()
	if len(r.order) == 0 || r.order[0] != "start" {
		t.Errorf("first event is not start: %v", r.order)
	}
	return r
}

func startBash(t *testing.T, ctx context.Context, c interface {
	Start(context.Context, *connect.Request[pb.StartRequest]) (*connect.ServerStreamForClient[pb.StartResponse], error)
}, script string, mod ...func(*pb.StartRequest)) *procResult {
	t.Helper()
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", script}}, Stdin: new(false)}
	for _, m := range mod {
		m(req)
	}
	s, err := c.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return collect(t, s, func() *pb.ProcessEvent { return event(s.Msg()) })
}

func TestStartOutputAndExit(t *testing.T) {
	env := newTestEnv(t)
	codecs(t, func(t *testing.T, opts ...connect.ClientOption) {
		r := startBash(t, t.Context(), env.proc(opts...), "echo hi; echo oops >&2; exit 3")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.pid == 0 || r.stdout.String() != "hi\n" || r.stderr.String() != "oops\n" {
			t.Fatalf("pid %d stdout %q stderr %q", r.pid, r.stdout.String(), r.stderr.String())
		}
		e := r.end
		if e == nil || e.ExitCode != 3 || !e.Exited || e.Status != "exit status 3" || e.GetError() != "exit status 3" {
			t.Fatalf("end = %v", e)
		}
		ok := startBash(t, t.Context(), env.proc(opts...), "true")
		if ok.end == nil || ok.end.ExitCode != 0 || ok.end.Error != nil || ok.end.Status != "exit status 0" {
			t.Fatalf("success end = %v", ok.end)
		}
	})
}

func TestStartLargeOutputChunked(t *testing.T) {
	env := newTestEnv(t)
	r := startBash(t, t.Context(), env.proc(connect.WithProtoJSON()), "head -c 3000000 /dev/zero | tr '\\0' x")
	if r.err != nil || r.stdout.Len() != 3000000 || strings.Trim(r.stdout.String(), "x") != "" {
		t.Fatalf("err %v, got %d bytes", r.err, r.stdout.Len())
	}
}

func TestStartEnvCwdUser(t *testing.T) {
	env := newTestEnv(t)
	if err := os.Mkdir(filepath.Join(env.home, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := startBash(t, t.Context(), env.proc(), `echo "$HOME|$USER|$LOGNAME|$GLOBAL_VAR|$SHARED|$REQ|$(pwd)"; [ -n "$PATH" ]`,
		func(req *pb.StartRequest) {
			req.Process.Envs = map[string]string{"REQ": "r", "SHARED": "from-request"}
			req.Process.Cwd = new("work") // relative to the user's home
		})
	want := env.home + "|user|user|global|from-request|r|" + filepath.Join(env.home, "work") + "\n"
	if r.stdout.String() != want || r.end.GetExitCode() != 0 {
		t.Fatalf("got %q (exit %d), want %q", r.stdout.String(), r.end.GetExitCode(), want)
	}
	// Absent cwd means the user's home.
	r = startBash(t, t.Context(), env.proc(), `pwd`)
	if r.stdout.String() != env.home+"\n" {
		t.Fatalf("default cwd %q", r.stdout.String())
	}

	s, err := env.proc().Start(t.Context(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true", Cwd: new("/does/not/exist")}}))
	if err == nil {
		s.Receive()
		err = s.Err()
	}
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "/does/not/exist") {
		t.Fatalf("bad cwd: %v", err)
	}

	for _, pty := range []*pb.PTY{nil, {Size: &pb.PTY_Size{Cols: 80, Rows: 24}}} {
		s, err = env.proc().Start(t.Context(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/no/such/binary"}, Pty: pty}))
		if err == nil {
			s.Receive()
			err = s.Err()
		}
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "/no/such/binary") {
			t.Fatalf("missing binary: %v", err)
		}
	}

	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true"}})
	req.Header().Set("Authorization", basicAuth("mallory"))
	s, err = env.proc().Start(t.Context(), req)
	if err == nil {
		s.Receive()
		err = s.Err()
	}
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "mallory") {
		t.Fatalf("unknown user: %v", err)
	}
}

func TestStartAsOtherUserWhenRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch uid")
	}
	env := newTestEnv(t)
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "id -u; id -g; echo $USER"}, Cwd: new("/")}})
	req.Header().Set("Authorization", basicAuth("nobody"))
	s, err := env.proc().Start(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, s, func() *pb.ProcessEvent { return event(s.Msg()) })
	if r.stdout.String() != "65534\n65534\nnobody\n" {
		t.Fatalf("got %q %q %v", r.stdout.String(), r.stderr.String(), r.err)
	}
}

func TestDeadlineKillsProcess(t *testing.T) {
	env := newTestEnv(t)
	codecs(t, func(t *testing.T, opts ...connect.ClientOption) {
		pidFile := filepath.Join(t.TempDir(), "child")
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		// The background sleep checks that the whole process group dies.
		r := startBash(t, ctx, env.proc(opts...), "sleep 60 & echo $! > "+pidFile+"; wait")
		if connect.CodeOf(r.err) != connect.CodeDeadlineExceeded {
			t.Fatalf("err = %v, want deadline_exceeded", r.err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("took %s", d)
		}
		eventually(t, 5*time.Second, "process removed after its deadline", func() bool {
			l, err := env.proc(opts...).List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
			return err == nil && len(l.Msg.Processes) == 0
		})
		b, _ := os.ReadFile(pidFile)
		child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if child == 0 {
			t.Fatal("no child pid")
		}
		eventually(t, 5*time.Second, "background child killed", func() bool {
			return syscall.Kill(child, 0) != nil
		})
	})
}

func TestDisconnectKeepsProcessAndConnectReattaches(t *testing.T) {
	env := newTestEnv(t)
	codecs(t, func(t *testing.T, opts ...connect.ClientOption) {
		c := env.proc(opts...)
		flag := filepath.Join(t.TempDir(), "go")
		ctx, cancel := context.WithCancel(t.Context())
		s, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{
			Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "echo first; while [ ! -e " + flag + " ]; do sleep 0.05; done; echo second; exit 7"}},
			Tag:     new("job-" + t.Name()),
		}))
		if err != nil {
			t.Fatal(err)
		}
		if !s.Receive() || s.Msg().GetEvent().GetStart() == nil {
			t.Fatalf("no start event: %v", s.Err())
		}
		pid := s.Msg().GetEvent().GetStart().GetPid()
		if !s.Receive() || string(s.Msg().GetEvent().GetData().GetStdout()) != "first\n" {
			t.Fatalf("first output: %v %v", s.Msg(), s.Err())
		}
		cancel() // the client goes away
		s.Close()

		l, err := c.List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Msg.Processes) != 1 || l.Msg.Processes[0].GetPid() != pid || l.Msg.Processes[0].GetTag() != "job-"+t.Name() ||
			l.Msg.Processes[0].GetConfig().GetCmd() != "/bin/bash" {
			t.Fatalf("list = %v", l.Msg.Processes)
		}

		cs, err := c.Connect(t.Context(), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "job-" + t.Name()}}}))
		if err != nil {
			t.Fatal(err)
		}
		// Connect's first event is start{pid} too; release the process once attached.
		if !cs.Receive() || cs.Msg().GetEvent().GetStart().GetPid() != pid {
			t.Fatalf("connect start: %v %v", cs.Msg(), cs.Err())
		}
		os.WriteFile(flag, nil, 0o644)
		r := collectRest(t, cs, func() *pb.ProcessEvent { return event(cs.Msg()) })
		if r.err != nil || r.stdout.String() != "second\n" || r.end.GetExitCode() != 7 {
			t.Fatalf("reattached: err %v stdout %q end %v", r.err, r.stdout.String(), r.end)
		}
		eventually(t, 2*time.Second, "finished process removed", func() bool {
			_, err := c.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
			return connect.CodeOf(err) == connect.CodeNotFound
		})
	})
}

func TestUnreadOutputDoesNotBlockProcess(t *testing.T) {
	env := newTestEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	s, err := env.proc().Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "head -c 50000000 /dev/zero; head -c 50000000 /dev/zero >&2"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	s.Receive()
	cancel()
	s.Close()
	eventually(t, 20*time.Second, "process finished with nobody reading", func() bool {
		l, err := env.proc().List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
		return err == nil && len(l.Msg.Processes) == 0
	})
}

func TestStdinCatAndCloseStdin(t *testing.T) {
	env := newTestEnv(t)
	codecs(t, func(t *testing.T, opts ...connect.ClientOption) {
		c := env.proc(opts...)
		s, err := c.Start(t.Context(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}})) // stdin absent = true
		if err != nil {
			t.Fatal(err)
		}
		if !s.Receive() {
			t.Fatal(s.Err())
		}
		pid := s.Msg().GetEvent().GetStart().GetPid()
		sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
		if _, err := c.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("hello\n")}}})); err != nil {
			t.Fatal(err)
		}
		if !s.Receive() || string(s.Msg().GetEvent().GetData().GetStdout()) != "hello\n" {
			t.Fatalf("echo: %v %v", s.Msg(), s.Err())
		}
		if _, err := c.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
			t.Fatal(err)
		}
		r := collectRest(t, s, func() *pb.ProcessEvent { return event(s.Msg()) })
		if r.err != nil || r.end.GetExitCode() != 0 || !r.end.GetExited() {
			t.Fatalf("cat after EOF: %v %v", r.err, r.end)
		}

		// stdin=false: input is refused clearly.
		s2, err := c.Start(t.Context(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"10"}}, Stdin: new(false)}))
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		s2.Receive()
		sel2 := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: s2.Msg().GetEvent().GetStart().GetPid()}}
		_, err = c.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel2, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("input without stdin: %v", err)
		}
		c.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: sel2, Signal: pb.Signal_SIGNAL_SIGKILL}))
	})
}

func TestStreamInput(t *testing.T) {
	env := newTestEnv(t)
	c := env.proc()
	s, err := c.Start(t.Context(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Tag: new("streamed")}))
	if err != nil {
		t.Fatal(err)
	}
	s.Receive()
	in := c.StreamInput(t.Context())
	in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "streamed"}}}}})
	in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}})
	in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("via stream\n")}}}}})
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	if !s.Receive() || string(s.Msg().GetEvent().GetData().GetStdout()) != "via stream\n" {
		t.Fatalf("got %v %v", s.Msg(), s.Err())
	}
	c.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "streamed"}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
	s.Close()
}

func TestSignals(t *testing.T) {
	env := newTestEnv(t)
	codecs(t, func(t *testing.T, opts ...connect.ClientOption) {
		c := env.proc(opts...)
		for _, tc := range []struct {
			sig    pb.Signal
			status string
		}{{pb.Signal_SIGNAL_SIGTERM, "signal: terminated"}, {pb.Signal_SIGNAL_SIGKILL, "signal: killed"}} {
			s, err := c.Start(t.Context(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"30"}}, Stdin: new(false)}))
			if err != nil {
				t.Fatal(err)
			}
			s.Receive()
			pid := s.Msg().GetEvent().GetStart().GetPid()
			if _, err := c.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: tc.sig})); err != nil {
				t.Fatal(err)
			}
			r := collectRest(t, s, func() *pb.ProcessEvent { return event(s.Msg()) })
			if r.end == nil || r.end.Status != tc.status || r.end.Exited || r.end.ExitCode != -1 || r.end.GetError() != tc.status {
				t.Fatalf("%v: end %v", tc.sig, r.end)
			}
		}
		missing := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 1<<31 - 1}}
		if _, err := c.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: missing, Signal: pb.Signal_SIGNAL_SIGKILL})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("signal unknown pid: %v", err)
		}
		cs, err := c.Connect(t.Context(), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "nope"}}}))
		if err == nil {
			cs.Receive()
			err = cs.Err()
		}
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("connect unknown tag: %v", err)
		}
		for _, call := range []func() error{
			func() error {
				_, err := c.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: missing}))
				return err
			},
			func() error {
				_, err := c.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: missing}))
				return err
			},
			func() error {
				_, err := c.Update(t.Context(), connect.NewRequest(&pb.UpdateRequest{Process: missing}))
				return err
			},
		} {
			if err := call(); connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("unknown pid: %v", err)
			}
		}
	})
}

func TestKeepalive(t *testing.T) {
	env := newTestEnv(t)
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"1.3"}}, Stdin: new(false)})
	req.Header().Set("Keepalive-Ping-Interval", "0.4")
	s, err := env.proc(connect.WithProtoJSON()).Start(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, s, func() *pb.ProcessEvent { return event(s.Msg()) })
	if r.keepalives < 2 || r.end == nil {
		t.Fatalf("keepalives %d, events %v", r.keepalives, r.order)
	}
}

func TestPTY(t *testing.T) {
	env := newTestEnv(t)
	codecs(t, func(t *testing.T, opts ...connect.ClientOption) {
		c := env.proc(opts...)
		s, err := c.Start(t.Context(), connect.NewRequest(&pb.StartRequest{
			Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", `stty size; [ -t 0 ] && echo tty; read -r x; stty size; echo "got:$x"`}, Envs: map[string]string{"TERM": "xterm"}},
			Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 30}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !s.Receive() {
			t.Fatal(s.Err())
		}
		pid := s.Msg().GetEvent().GetStart().GetPid()
		sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
		var out bytes.Buffer
		for !strings.Contains(out.String(), "tty") && s.Receive() {
			out.Write(s.Msg().GetEvent().GetData().GetPty())
		}
		if !strings.Contains(out.String(), "30 100") {
			t.Fatalf("pty output %q", out.String())
		}
		if _, err := c.Update(t.Context(), connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 120, Rows: 40}}})); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("CloseStdin on pty: %v", err)
		}
		if _, err := c.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("abc\n")}}})); err != nil {
			t.Fatal(err)
		}
		r := collectRest(t, s, func() *pb.ProcessEvent { return event(s.Msg()) })
		out.Write(r.pty.Bytes())
		if !strings.Contains(out.String(), "40 120") || !strings.Contains(out.String(), "got:abc") || r.end.GetExitCode() != 0 {
			t.Fatalf("pty output %q, end %v, err %v", out.String(), r.end, r.err)
		}
	})
}

// TestRawJSONWire pins the exact bytes the E2B SDKs see.
func TestRawJSONWire(t *testing.T) {
	env := newTestEnv(t)
	resp, frames := rawStream(t, env.url, "/process.Process/Start",
		`{"process":{"cmd":"/bin/bash","args":["-l","-c","printf hi"]},"stdin":false}`,
		map[string]string{"Keepalive-Ping-Interval": "50", "Connect-Timeout-Ms": "60000"})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if len(frames) != 4 {
		t.Fatalf("frames %q", frames)
	}
	start := mustJSON(t, frames[0].payload)
	pid := start["event"].(map[string]any)["start"].(map[string]any)["pid"]
	if _, isNum := pid.(float64); !isNum || frames[0].flags != 0 {
		t.Fatalf("start frame %s", frames[0].payload)
	}
	jsonEq(t, frames[1].payload, `{"event":{"data":{"stdout":"`+base64.StdEncoding.EncodeToString([]byte("hi"))+`"}}}`)
	jsonEq(t, frames[2].payload, `{"event":{"end":{"exited":true,"status":"exit status 0"}}}`)
	if frames[3].flags != 2 || string(frames[3].payload) != `{}` {
		t.Fatalf("end-stream frame %x %s", frames[3].flags, frames[3].payload)
	}

	_, frames = rawStream(t, env.url, "/process.Process/Start", `{"process":{"cmd":"/bin/bash","args":["-c","exit 2"]}}`, nil)
	jsonEq(t, frames[len(frames)-2].payload, `{"event":{"end":{"exitCode":2,"exited":true,"status":"exit status 2","error":"exit status 2"}}}`)

	// Errors of a stream travel in the end-stream frame with HTTP 200.
	resp, frames = rawStream(t, env.url, "/process.Process/Connect", `{"process":{"pid":999999}}`, nil)
	if resp.StatusCode != 200 || len(frames) != 1 || frames[0].flags != 2 {
		t.Fatalf("connect error: %d %q", resp.StatusCode, frames)
	}
	m := mustJSON(t, frames[0].payload)
	if e := m["error"].(map[string]any); e["code"] != "not_found" || !strings.Contains(e["message"].(string), "999999") {
		t.Fatalf("end-stream error %s", frames[0].payload)
	}

	// Unary errors: HTTP status + {"code":"…","message":"…"}.
	status, body := rawUnary(t, env.url, "/process.Process/SendSignal", `{"process":{"pid":999999},"signal":"SIGNAL_SIGKILL"}`, nil)
	if status != http.StatusNotFound || body["code"] != "not_found" {
		t.Fatalf("unary error %d %v", status, body)
	}
	status, body = rawUnary(t, env.url, "/process.Process/List", `{}`, map[string]string{"Authorization": basicAuth("eve")})
	if status != http.StatusUnauthorized || body["code"] != "unauthenticated" {
		t.Fatalf("bad user %d %v", status, body)
	}
	status, body = rawUnary(t, env.url, "/process.Process/List", `{}`, map[string]string{"Authorization": basicAuth("user")})
	if status != 200 || len(body) != 0 {
		t.Fatalf("empty list %d %v", status, body)
	}
}

// TestSlowSubscriberIsCutOff checks the flow-control policy at the unit
// level (over HTTP, socket buffers would hide a slow reader for megabytes).
func TestSlowSubscriberIsCutOff(t *testing.T) {
	p := &proc{pid: 1, stall: 200 * time.Millisecond, subs: map[*subscriber]struct{}{}}
	slow, fast := newSubscriber(), newSubscriber()
	p.subscribe(slow)
	p.subscribe(fast)
	got := make(chan int)
	go func() {
		n := 0
		for range fast.ch {
			n++
			if n == subscriberQueue*3 {
				break
			}
		}
		got <- n
	}()
	start := time.Now()
	for range subscriberQueue * 3 {
		p.broadcast(&pb.ProcessEvent{})
	}
	if n := <-got; n != subscriberQueue*3 {
		t.Fatalf("fast subscriber got %d", n)
	}
	select {
	case <-slow.kicked:
	default:
		t.Fatal("slow subscriber not cut off")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a slow subscriber stalled the others for %s", d)
	}
	err := p.pump(t.Context(), slow, time.Minute, func(*pb.ProcessEvent) error { return nil })
	// The kicked subscriber may first drain what it had queued.
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("pump of kicked subscriber: %v", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal("unexpected cancel")
	}
}

func TestCloseKillsAll(t *testing.T) {
	env := newTestEnv(t)
	s, err := env.proc().Start(t.Context(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}}))
	if err != nil {
		t.Fatal(err)
	}
	s.Receive()
	pid := int(s.Msg().GetEvent().GetStart().GetPid())
	env.procs.Close()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("pid %d still alive after Close", pid)
	}
	s2, err := env.proc().Start(t.Context(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true"}}))
	if err == nil {
		s2.Receive()
		err = s2.Err()
	}
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("start after Close: %v", err)
	}
}
