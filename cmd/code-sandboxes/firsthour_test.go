package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// exec --json writes one JSON document and nothing else on stdout, even
// when the code prints.
func TestExecJSONIsJSONOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	out, errs, code := cli(t, "", "exec", "--json", "print('hello'); 40 + 2")
	if code != 0 {
		t.Fatalf("exec --json: %d %q %q", code, out, errs)
	}
	var ex struct {
		Logs struct {
			Stdout []struct {
				Line string `json:"line"`
			} `json:"stdout"`
		} `json:"logs"`
		Results []struct {
			Data map[string]any `json:"data"`
		} `json:"results"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&ex); err != nil {
		t.Fatalf("stdout is not a JSON document: %v\n%q", err, out)
	}
	if dec.More() {
		t.Fatalf("stdout has more than the JSON document: %q", out)
	}
	if len(ex.Results) != 1 || ex.Results[0].Data["text/plain"] != "42" || len(ex.Logs.Stdout) != 1 || ex.Logs.Stdout[0].Line != "hello\n" {
		t.Fatalf("exec --json document: %+v", ex)
	}
}

// exec and repl run in an existing sandbox with --sandbox; state persists
// between calls and the sandbox outlives them.
func TestExecInExistingSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	out, errs, code := cli(t, "", "create", "--name", "cli-existing", "--lifetime", "5m")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	defer cli(t, "", "delete", "-y", id)
	if out, errs, code := cli(t, "", "exec", "--sandbox", id, "x = 41"); code != 0 {
		t.Fatalf("exec --sandbox: %d %q %q", code, out, errs)
	}
	if out, errs, code := cli(t, "", "exec", "--sandbox", "cli-existing", "x + 1"); code != 0 || strings.TrimSpace(out) != "42" {
		t.Fatalf("exec --sandbox NAME keeps state: %d %q %q", code, out, errs)
	}
	if out, errs, code := cli(t, "x * 2\n:exit\n", "repl", "--sandbox", id); code != 0 || !strings.Contains(out, "82") {
		t.Fatalf("repl --sandbox: %d %q %q", code, out, errs)
	}
	if out, _, code := cli(t, "", "get", id); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("the sandbox did not outlive exec/repl --sandbox: %d %q", code, out)
	}
	if _, errs, code := cli(t, "", "exec", "--sandbox", id, "--memory", "1G", "1"); code != 1 || !strings.Contains(errs, "--memory") {
		t.Errorf("--sandbox with a creation flag: %d %q", code, errs)
	}
	if _, errs, code := cli(t, "", "exec", "--sandbox", "no-such-sandbox", "1"); code != 1 || !strings.Contains(errs, "not found") {
		t.Errorf("--sandbox missing: %d %q", code, errs)
	}
}

// Sizes are read as people write them; nonsense is refused.
func TestSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"512Mi": 512 << 20, "512M": 512 << 20, "2g": 2 << 30, "1.5GiB": 3 << 29, "64m": 64 << 20} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"64Mfoo", "-1G", "0", "lots", "1Q"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

// ptyREPL runs the repl on a pseudo-terminal and reads its screen.
type ptyREPL struct {
	t    *testing.T
	cmd  *exec.Cmd
	tty  *os.File
	mu   sync.Mutex
	seen strings.Builder
	done chan struct{}
}

func startPTYREPL(t *testing.T, args ...string) *ptyREPL {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"repl"}, args...)...)
	cmd.Env = append(os.Environ(), "CODE_SANDBOXES_RUNTIME_DIR="+runtime)
	cmd.Dir = t.TempDir()
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	r := &ptyREPL{t: t, cmd: cmd, tty: tty, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		br := bufio.NewReader(tty)
		buf := make([]byte, 4096)
		for {
			n, err := br.Read(buf)
			r.mu.Lock()
			r.seen.Write(buf[:n])
			r.mu.Unlock()
			if err != nil {
				if err != io.EOF {
					return
				}
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		tty.Close()
	})
	return r
}

// waitFor waits (bounded) until the screen holds want after offset from.
func (r *ptyREPL) waitFor(from int, want string) int {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		s := r.seen.String()
		r.mu.Unlock()
		if i := strings.Index(s[min(from, len(s)):], want); i >= 0 {
			return from + i + len(want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Fatalf("the repl never showed %q; screen:\n%s", want, r.seen.String())
	return 0
}

// Ctrl-C in the repl interrupts the running cell and the session stays;
// the repl shows sys.exit codes.
func TestREPLCtrlCInterrupts(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	r := startPTYREPL(t)
	pos := r.waitFor(0, ">>> ")
	io.WriteString(r.tty, "x = 7\n")
	pos = r.waitFor(pos, ">>> ")
	io.WriteString(r.tty, "import time; print('sleeping', flush=True); time.sleep(60)\n")
	pos = r.waitFor(pos, "sleeping")
	time.Sleep(200 * time.Millisecond)
	io.WriteString(r.tty, "\x03") // ^C: the terminal sends SIGINT
	pos = r.waitFor(pos, "KeyboardInterrupt")
	pos = r.waitFor(pos, ">>> ")
	io.WriteString(r.tty, "x * 6\n")
	pos = r.waitFor(pos, "42")
	pos = r.waitFor(pos, ">>> ")
	io.WriteString(r.tty, "import sys; sys.exit(3)\n")
	pos = r.waitFor(pos, "exit code 3")
	r.waitFor(pos, ">>> ")
	io.WriteString(r.tty, ":exit\n")
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the repl did not end after :exit")
	}
	if err := r.cmd.Wait(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("the repl died of a signal: %v", err)
			}
		}
		t.Fatalf("repl: %v", err)
	}
}
