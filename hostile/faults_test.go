package hostile_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/e2b"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

func newLocal(t *testing.T, mod func(*sandboxes.Config)) *sandboxes.Sandbox {
	t.Helper()
	cfg := localCfg()
	if mod != nil {
		mod(&cfg)
	}
	sb, err := sandboxes.Create(ctxBG(time.Minute), cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	readRec(t, rt, sb.ID())
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

func run(t *testing.T, sb *sandboxes.Sandbox, code string, opts ...sandboxes.RunOption) *sandboxes.Execution {
	t.Helper()
	ex, err := sb.RunCode(ctxBG(time.Minute), code, opts...)
	if err != nil {
		t.Fatalf("RunCode(%.50q): %v", code, err)
	}
	return ex
}

// TestFaultKillKernel: the kernel is SIGKILLed from another process in the
// sandbox while it runs: the execution ends promptly with KernelDied and the
// next one runs, saying the state was lost.
func TestFaultKillKernel(t *testing.T) {
	requireLocal(t)
	sb := newLocal(t, nil)
	run(t, sb, "x = 1")
	pid := make(chan string, 1)
	start := time.Now()
	done := make(chan *sandboxes.Execution, 1)
	go func() {
		ex, _ := sb.RunCode(ctxBG(time.Minute), "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(600)",
			sandboxes.OnStdout(func(m sandboxes.OutputMessage) {
				select {
				case pid <- strings.TrimSpace(m.Line):
				default:
				}
			}))
		done <- ex
	}()
	var p string
	select {
	case p = <-pid:
	case <-time.After(30 * time.Second):
		t.Fatal("the kernel never printed its pid")
	}
	if _, err := sb.Commands().Run(ctxBG(30*time.Second), "kill -9 "+p); err != nil {
		t.Fatal(err)
	}
	var ex *sandboxes.Execution
	select {
	case ex = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("HANG: the execution did not end within 30s of its kernel's death")
	}
	if ex == nil || ex.Error == nil || ex.Error.Name != "KernelDied" {
		t.Fatalf("killed kernel reported as %+v", ex)
	}
	ex2 := run(t, sb, "x")
	if ex2.Error == nil || !strings.Contains(ex2.Stderr(), "kernel restarted") {
		t.Errorf("after the kernel's death: %v, stderr %q", ex2.Error, ex2.Stderr())
	}
	t.Logf("RESULT kill the kernel: KernelDied after %s; next execution ran in a fresh kernel and said so", time.Since(start).Round(time.Millisecond))
}

// TestFaultKillAgent: the agent (the sandbox's PID 1) is SIGKILLed from the
// host mid-execution: RunCode returns ErrUnavailable promptly, the sandbox
// disappears from List and nothing of it lingers.
func TestFaultKillAgent(t *testing.T) {
	requireLocal(t)
	sb := newLocal(t, nil)
	r := readRec(t, rt, sb.ID())
	started := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := sb.RunCode(ctxBG(time.Minute), "import time\nprint('go', flush=True)\ntime.sleep(600)",
			sandboxes.OnStdout(func(sandboxes.OutputMessage) {
				select {
				case started <- struct{}{}:
				default:
				}
			}))
		done <- err
	}()
	<-started
	start := time.Now()
	if err := syscall.Kill(r.AgentPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("HANG: RunCode did not return within 30s of the agent's death")
	}
	d := time.Since(start)
	if err == nil {
		t.Fatal("RunCode succeeded although the agent was killed")
	}
	if !errors.Is(err, sandboxes.ErrUnavailable) {
		t.Errorf("agent killed: RunCode error %v, want ErrUnavailable", err)
	}
	waitGone(t, rt, sb.ID())
	if _, err := sb.RunCode(ctxBG(30*time.Second), "1"); !errors.Is(err, sandboxes.ErrUnavailable) && !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("RunCode on the dead sandbox: %v", err)
	}
	t.Logf("RESULT kill the agent: RunCode returned after %s: %v; sandbox gone", d.Round(time.Millisecond), err)
}

// TestFaultKillCreator: the process that created a sandbox dies by SIGKILL.
// The sandbox is then listed, reachable (state intact) and killable from this
// process, and a second orphan expires on time.
func TestFaultKillCreator(t *testing.T) {
	requireLocal(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	orphan := func() (string, time.Time) {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), helperEnv+"="+rt)
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		created := time.Now()
		var id string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "id" {
				id = f[1]
			}
		}
		err := cmd.Wait()
		if id == "" {
			t.Fatalf("helper made no sandbox: %v", err)
		}
		if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("helper did not die by SIGKILL: %v", err)
		}
		readRec(t, rt, id)
		return id, created
	}
	id1, _ := orphan()
	list, err := sandboxes.List(ctxBG(30*time.Second), localCfg(), sandboxes.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, i := range list {
		listed = listed || i.ID == id1
	}
	if !listed {
		t.Fatalf("the orphan %s is not listed", id1)
	}
	sb, err := sandboxes.Get(ctxBG(30*time.Second), localCfg(), id1)
	if err != nil {
		t.Fatal(err)
	}
	if ex := run(t, sb, "orphan_state"); ex.Text() != "7" {
		t.Errorf("the orphan lost its state: %q %v", ex.Text(), ex.Error)
	}
	_ = sb.Detach()
	if ids, err := sandboxes.Kill(ctxBG(30*time.Second), localCfg(), id1, sandboxes.ListOptions{}); err != nil || len(ids) != 1 {
		t.Fatalf("Kill(orphan) = %v, %v", ids, err)
	}
	waitGone(t, rt, id1)

	id2, created := orphan()
	// Lifetime 8s (+5s supervisor grace): gone by 20s after creation.
	deadline := created.Add(25 * time.Second)
	for {
		if _, err := os.Stat(local.SandboxDir(rt, id2)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the orphan %s outlived its 8s lifetime by more than 17s", id2)
		}
		time.Sleep(200 * time.Millisecond)
	}
	expired := time.Since(created)
	waitGone(t, rt, id2)
	t.Logf("RESULT kill the creating process: orphan listed, reachable with its state, killable; a second orphan (lifetime 8s) was gone %s after creation", expired.Round(time.Millisecond))
}

// TestFaultDiskFull: with the sandbox's home full, file uploads and code
// fail with a clear error, nothing hangs, and freeing space recovers.
func TestFaultDiskFull(t *testing.T) {
	requireLocal(t)
	sb := newLocal(t, nil)
	run(t, sb, "f = open('/home/user/fill', 'wb')\ntry:\n    while True: f.write(b'\\0' * (8 << 20))\nexcept OSError: pass\nf.close()")
	err := sb.Files().WriteBytes(ctxBG(30*time.Second), "/home/user/more.bin", make([]byte, 4<<20))
	if err == nil {
		t.Error("upload into a full /home/user succeeded")
	}
	ex := run(t, sb, "open('/home/user/x', 'w').write('y' * 100000)")
	if ex.Error == nil || !strings.Contains(ex.Error.Value+ex.Error.Name, "space") {
		t.Errorf("write into a full disk: %+v", ex.Error)
	}
	// Attachments land in /files, a separate mount: still fine.
	if ex := run(t, sb, "print(open('/files/a.txt').read())", sandboxes.WithFiles(map[string][]byte{"a.txt": []byte("still works")})); !strings.Contains(ex.Stdout(), "still works") {
		t.Errorf("attachment with a full home: %q %v", ex.Stdout(), ex.Error)
	}
	run(t, sb, "import os; os.remove('/home/user/fill')")
	if err := sb.Files().WriteBytes(ctxBG(30*time.Second), "/home/user/more.bin", make([]byte, 4<<20)); err != nil {
		t.Errorf("upload after freeing space: %v", err)
	}
	t.Logf("RESULT full disk inside: upload refused with %q; code got %s; recovered after freeing", firstLine(err), ex.Error.Name)
}

func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 140 {
		s = s[:140] + "…"
	}
	return s
}

// TestFaultDeleteWhileStreaming: another process kills the sandbox while a
// RunCode streams: the stream ends promptly with ErrUnavailable, every line
// received before is intact and in order.
func TestFaultDeleteWhileStreaming(t *testing.T) {
	requireLocal(t)
	sb := newLocal(t, nil)
	var mu sync.Mutex
	var lines []string
	first := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := sb.RunCode(ctxBG(time.Minute), "import time\nfor i in range(100000):\n    print('line', i, flush=True)\n    time.sleep(0.01)",
			sandboxes.OnStdout(func(m sandboxes.OutputMessage) {
				mu.Lock()
				// A message may carry several lines (output that arrived
				// together is sent together): every line is checked.
				for _, l := range strings.Split(strings.TrimRight(m.Line, "\n"), "\n") {
					lines = append(lines, strings.TrimSpace(l))
				}
				mu.Unlock()
				select {
				case first <- struct{}{}:
				default:
				}
			}))
		done <- err
	}()
	<-first
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if _, err := sandboxes.Kill(ctxBG(30*time.Second), localCfg(), sb.ID(), sandboxes.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("HANG: RunCode still streams 30s after its sandbox was deleted")
	}
	d := time.Since(start)
	if err == nil {
		t.Error("RunCode on a deleted sandbox reported success")
	} else if !errors.Is(err, sandboxes.ErrUnavailable) {
		t.Errorf("RunCode on a deleted sandbox: %v, want ErrUnavailable", err)
	}
	mu.Lock()
	n := len(lines)
	var got []string
	for _, l := range lines {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	mu.Unlock()
	for i, l := range got {
		if l != "line "+itoa(i) {
			t.Fatalf("line %d is %q: lost or reordered", i, l)
		}
	}
	waitGone(t, rt, sb.ID())
	t.Logf("RESULT delete while streaming: %d lines intact and in order; RunCode returned %s after the kill: %s", n, d.Round(time.Millisecond), firstLine(err))
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestFaultServerRestart: code-sandboxes serve restarts (keeping its
// sandboxes) while a client holds one: the client's handle works again
// once the server is back, with its state.
func TestFaultServerRestart(t *testing.T) {
	requireLocal(t)
	srt, err := os.MkdirTemp("", "cs-hostile-srv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(srt)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	start := func(ln net.Listener, keep bool) (stop func() error) {
		s, err := e2bserver.New(e2bserver.Options{APIKeys: []string{testKey}, Config: sandboxes.Config{Options: local.Options{RuntimeDir: srt}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, ln, keep) }()
		return func() error {
			cancel()
			select {
			case err := <-done:
				return err
			case <-time.After(90 * time.Second):
				return errors.New("HANG: the server did not shut down within 90s")
			}
		}
	}
	stop := start(ln, true)
	cfg := sandboxes.Config{Variant: "e2b", Options: e2b.Options{APIKey: testKey, APIURL: "http://" + addr, SandboxURL: "http://" + addr}}
	sb, err := sandboxes.Create(ctxBG(time.Minute), cfg)
	if err != nil {
		_ = stop()
		t.Fatal(err)
	}
	run(t, sb, "kept = 'yes'")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Down: a bounded, clear error.
	t0 := time.Now()
	_, downErr := sb.RunCode(ctxBG(30*time.Second), "1")
	down := time.Since(t0)
	if downErr == nil || down > 20*time.Second {
		t.Errorf("RunCode while the server is down: %v after %s", downErr, down)
	}
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("re-listen on %s: %v", addr, err)
	}
	stop2 := start(ln2, true)
	ex, err2 := sb.RunCode(ctxBG(time.Minute), "kept")
	if err2 != nil || ex.Text() != "yes" {
		t.Errorf("after the restart: %v %+v", err2, ex)
	}
	_ = sb.Close()
	if err := stop2(); err != nil {
		t.Error(err)
	}
	waitGoneDir(t, srt)
	t.Logf("RESULT server restart: while down RunCode failed in %s (%s); after restart the held sandbox answered with its state", down.Round(time.Millisecond), firstLine(downErr))
}

func waitGoneDir(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ents, _ := os.ReadDir(dir)
		if len(ents) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, e := range ents {
				_, _ = sandboxes.Kill(ctxBG(30*time.Second), sandboxes.Config{Options: local.Options{RuntimeDir: dir}}, e.Name(), sandboxes.ListOptions{})
			}
			t.Fatalf("sandboxes left behind in %s: %d", dir, len(ents))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"
