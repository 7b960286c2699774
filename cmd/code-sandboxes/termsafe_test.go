//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

func TestTermSafe(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain text, ünïcode ✓\n\ttab\r", "plain text, ünïcode ✓\n\ttab\r"},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"\x1b]52;c;ZXZpbA==\x07", `\x1b]52;c;ZXZpbA==\x07`},
		{"a\bb\x7f", `a\x08b\x7f`},
		{"\u009b31m", `\u009b31m`},
		{"raw \x9b byte", `raw \x9b byte`},
	} {
		var b bytes.Buffer
		n, err := termSafe{&b}.Write([]byte(c.in))
		if err != nil || n != len(c.in) || b.String() != c.want {
			t.Errorf("%q: wrote %q (%d, %v), want %q", c.in, b.String(), n, err, c.want)
		}
	}
}

// openPTY returns a pseudo-terminal pair (as envd's pty.go does).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		testdep.Require(t, false, "a pty (/dev/ptmx): "+err.Error())
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// TestExecEscapesControlSequencesOnATerminal: sandbox output with a screen
// clear and an OSC 52 clipboard write reaches a terminal escaped, and a
// pipe byte for byte.
func TestExecEscapesControlSequencesOnATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	const code = `import sys; sys.stdout.write("A\x1b[2J\x1b]52;c;ZXZpbA==\x07B\n"); sys.stderr.write("E\x1b[31mF\n")`
	out, _, rc := cli(t, "", "exec", code)
	if rc != 0 || !strings.Contains(out, "A\x1b[2J") {
		t.Fatalf("to a pipe the output must stay byte for byte: %d %q", rc, out)
	}
	master, slave := openPTY(t)
	defer master.Close()
	cmd := exec.Command(bin, "exec", code)
	cmd.Env = append(os.Environ(), "CODE_SANDBOXES_RUNTIME_DIR="+runtime)
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = slave, slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var got bytes.Buffer
	done := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				close(done)
				return
			}
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exec: %v\n%q", err, got.String())
	}
	select {
	case <-done: // EIO once the last slave is closed
	case <-time.After(10 * time.Second):
		master.Close()
		<-done
	}
	s := got.String()
	if strings.ContainsRune(s, 0x1b) || strings.ContainsRune(s, 0x07) {
		t.Fatalf("raw control sequences reached the terminal: %q", s)
	}
	if !strings.Contains(s, `A\x1b[2J\x1b]52;c;ZXZpbA==\x07B`) || !strings.Contains(s, `E\x1b[31mF`) {
		t.Fatalf("escaped output missing: %q", s)
	}
}
