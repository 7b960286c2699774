//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// ptyOutput collects what a pseudo-terminal's master reads, for bounded
// waits on it.
type ptyOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	from int
}

func (o *ptyOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.buf.Len() < 4<<20 {
		o.buf.Write(p)
	}
	return len(p), nil
}

func (o *ptyOutput) all() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits up to d for want after the previous match; every retry
// (if not nil) types its text again each second, for what is asynchronous.
func (o *ptyOutput) waitFor(t *testing.T, want string, d time.Duration, retry func()) {
	t.Helper()
	deadline := time.Now().Add(d)
	next := time.Now().Add(time.Second)
	for {
		o.mu.Lock()
		s := o.buf.String()[o.from:]
		if i := strings.Index(s, want); i >= 0 {
			o.from += i + len(want)
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("terminal shows no %q after %v; it shows %q", want, d, s)
		}
		if retry != nil && time.Now().After(next) {
			retry()
			next = time.Now().Add(time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// code-sandboxes shell driven through a real pseudo-terminal, as a user's
// terminal would: a command and its output, the size and a resize (through
// SIGWINCH), ^C interrupting sleep in the sandbox (not the CLI), the
// clipboard escape held back, the shell's exit status as the CLI's, the
// local terminal's mode restored and the sandbox removed.
func TestShellThroughPTY(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer tty.Close()
	if err := pty.Setsize(master, &pty.Winsize{Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "shell")
	cmd.Env = append(os.Environ(), "CODE_SANDBOXES_RUNTIME_DIR="+runtime, "TERM=xterm")
	cmd.Dir = t.TempDir()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// Its own session with the pty as controlling terminal, as a login
	// shell's child: resizes send it SIGWINCH.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
			}
		}
	}()
	out := &ptyOutput{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	typeKeys := func(s string) {
		t.Helper()
		if _, err := master.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	// Enter is \r in raw mode; the sandbox's terminal makes it a newline.
	// (bash turns bracketed paste off before a command runs: its output
	// follows "\x1b[?2004l\r".)
	typeKeys("echo $((6*7))\r")
	out.waitFor(t, "\r42\r\n", 90*time.Second, nil)

	// While the shell runs the local terminal is raw: no echo, no
	// line editing, no signals from keys.
	raw, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) != 0 {
		t.Errorf("local terminal not in raw mode while the shell runs: lflag %#x", raw.Lflag)
	}

	typeKeys("stty size\r")
	out.waitFor(t, "\r24 80\r\n", 20*time.Second, nil)
	if err := pty.Setsize(master, &pty.Winsize{Rows: 40, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	typeKeys("stty size\r")
	out.waitFor(t, "\r40 100\r\n", 20*time.Second, func() { typeKeys("stty size\r") })

	// ^C reaches the sandbox's foreground job; the CLI and the shell stay.
	start := time.Now()
	typeKeys("sleep 60; echo slept\r")
	time.Sleep(time.Second)
	typeKeys("\x03")
	typeKeys("echo after-$((1+2))\r")
	out.waitFor(t, "after-3\r\n", 20*time.Second, nil)
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("^C did not interrupt sleep (%v)", d)
	}

	// The sandbox may not write the local clipboard (OSC 52) nor have
	// the window title typed back into its input (CSI 21 t).
	typeKeys(`printf '\033]52;c;ZXZpbA==\007\033[21t'; echo osc-$((2+2))` + "\r")
	out.waitFor(t, "osc-4\r\n", 20*time.Second, nil)
	if s := out.all(); strings.Contains(s, "\x1b]52") || strings.Contains(s, "\x1b[21t") {
		t.Errorf("the clipboard or title-report escape reached the local terminal: %q", s)
	}

	typeKeys("exit 5\r")
	select {
	case err := <-exited:
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 5 {
			t.Errorf("shell exit 5: the CLI ended with %v, want exit status 5; terminal: %q", err, out.all())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the CLI did not end after the shell's exit; terminal: %q", out.all())
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Errorf("local terminal mode not restored:\nbefore %+v\nafter  %+v", *before, *after)
	}
	if ents, _ := os.ReadDir(runtime); len(ents) != 0 {
		t.Errorf("the shell's sandbox was left behind: %d entries in the runtime dir", len(ents))
	}
}

// Without a terminal on stdin shell refuses, saying what to do, before it
// creates anything.
func TestShellRefusesNonTerminal(t *testing.T) {
	out, errs, code := cli(t, "echo hi\n", "shell")
	if code == 0 || !strings.Contains(errs, "needs a terminal on stdin") || !strings.Contains(errs, "use exec") {
		t.Fatalf("shell without a terminal: %d %q %q", code, out, errs)
	}
	if ents, _ := os.ReadDir(runtime); len(ents) != 0 {
		t.Errorf("a sandbox was made for a refused shell: %d entries in the runtime dir", len(ents))
	}
}

// The output filter passes what a shell and its programs draw with and
// holds back the escapes that reach beyond the window, however they are
// split, nested or spelled (7-bit or as UTF-8 C1 controls).
func TestTermFilter(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain \r\n text ü €", "plain \r\n text ü €"},
		{"\x1b[1;31mred\x1b[0m\x1b[2J\x1b[H\x1b[?2004h", "\x1b[1;31mred\x1b[0m\x1b[2J\x1b[H\x1b[?2004h"},
		{"\x1b]0;title\x07x", "\x1b]0;title\x07x"},
		{"\x1b]8;;http://a\x1b\\link\x1b]8;;\x1b\\", "\x1b]8;;http://a\x1b\\link\x1b]8;;\x1b\\"},
		{"\x1b[8;50;100t\x1b[18t", "\x1b[8;50;100t\x1b[18t"},
		{"a\x1b]52;c;ZXZpbA==\x07b", "ab"},
		{"a\x1b]52;c;ZXZpbA==\x1b\\b", "ab"},
		{"a\x1b]50;?\x07b", "ab"},
		{"a\x1b[21tb\x1b[20t\x1b[21;1t", "ab"},
		{"a\x1bP$qm\x1b\\b", "ab"},
		{"a\x1b_apc\x1b\\b\x1b^pm\x1b\\\x1bXsos\x1b\\", "ab"},
		// Nested: an ESC ends what was open, and the new sequence is judged.
		{"\x1b]0;t\x1b]52;c;ZXZpbA==\x07", "\x1b]0;t"},
		{"\x1b[1\x1b]52;c;ZXZpbA==\x07", "\x1b[1"},
		{"\x1bP\x1b]52;c;eA==\x07z", "z"},
		// UTF-8 C1 controls: U+009D is OSC, U+009B CSI, U+0090 DCS.
		{"a\xc2\x9d52;c;ZXZpbA==\x07b", "ab"},
		{"a\xc2\x9b21tb", "ab"},
		{"a\xc2\x90$qm\xc2\x9cb", "ab"},
		{"\x1b[1\xc2\x9d52;c;eA==\x07", "\x1b[1"},
		{"\x1b]0;t\xc2\x9d52;c;eA==\x07", "\x1b]0;t"},
		{"\xc2\xa9", "\xc2\xa9"},
	}
	for _, c := range cases {
		for split := 0; split <= len(c.in); split++ {
			var got bytes.Buffer
			f := &termFilter{w: &got}
			f.Write([]byte(c.in[:split]))
			f.Write([]byte(c.in[split:]))
			if got.String() != c.want {
				t.Errorf("filter(%q split at %d) = %q, want %q", c.in, split, got.String(), c.want)
				break
			}
		}
	}
}

// shell SANDBOX runs in a sandbox that goes on: a signal to the CLI ends
// it with 128+signal, restores the terminal, and kills the shell it
// started there, while the sandbox stays.
func TestShellExistingSandboxSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	out, errs, code := cli(t, "", "create", "--name", "cli-shell-existing", "--lifetime", "5m")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	defer cli(t, "", "delete", "-y", id)

	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer tty.Close()
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "shell", id)
	cmd.Env = append(os.Environ(), "CODE_SANDBOXES_RUNTIME_DIR="+runtime, "TERM=xterm")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	term := &ptyOutput{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			term.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	if _, err := master.Write([]byte("echo in-$((6*7))\r")); err != nil {
		t.Fatal(err)
	}
	term.waitFor(t, "in-42\r\n", 90*time.Second, nil)

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+int(syscall.SIGTERM) {
			t.Errorf("SIGTERM: the CLI ended with %v, want exit status %d", err, 128+int(syscall.SIGTERM))
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the CLI did not end on SIGTERM")
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Errorf("local terminal mode not restored after SIGTERM")
	}
	// The sandbox goes on; the login shell the CLI started there doesn't.
	probe := `import os
n = 0
for p in os.listdir('/proc'):
    try:
        if p.isdigit() and open('/proc/%s/cmdline' % p, 'rb').read() == b'/bin/bash\x00-i\x00-l\x00':
            n += 1
    except OSError:
        pass
print('shells', n)`
	for i := 0; ; i++ {
		out, errs, code = cli(t, "", "exec", "--sandbox", id, probe)
		if code == 0 && strings.TrimSpace(out) == "shells 0" {
			break
		}
		if i == 20 {
			t.Fatalf("after the CLI ended: %d %q %q, want the sandbox running and no shell left", code, out, errs)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
