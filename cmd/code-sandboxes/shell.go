package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// shellKillWait bounds the clean-up calls made when the shell ends (the
// terminal's kill on a sandbox that goes on).
const shellKillWait = 5 * time.Second

// termName is what a TERM passed into the sandbox may look like; anything
// else becomes xterm-256color.
var termName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)

func shellCmd() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "shell [SANDBOX]",
		Short: "Open an interactive terminal in a new sandbox (removed on exit) or in a running one (by id or name)",
		Long: `Open an interactive login shell on a terminal in a sandbox, like docker exec -it.

Without SANDBOX a new sandbox is created for the shell and removed when it
ends. With SANDBOX (an id or name) the shell runs in that sandbox, which goes
on running afterwards; the shell itself is killed when this command ends.

The local terminal is in raw mode while the shell runs: every key, Ctrl-C
included, goes to the sandbox. The window size follows the local one. The
exit status is the shell's. Stdin must be a terminal: for scripts use exec.`,
		Example: `  code-sandboxes shell
  code-sandboxes shell --environment code-interpreter-v1
  code-sandboxes shell sb-1234abcd`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if cmd.Flags().Changed("sandbox") && c.sandbox != args[0] {
					return fmt.Errorf("give the sandbox once: as SANDBOX or as --sandbox, not both")
				}
				c.sandbox = args[0]
			}
			return runShell(cmd, &c, os.Stdin, os.Stdout)
		},
	}
	c.flags(cmd, true)
	c.existingFlag(cmd)
	return cmd
}

func runShell(cmd *cobra.Command, c *common, in, out *os.File) (err error) {
	fd := int(in.Fd())
	if !term.IsTerminal(fd) {
		return errors.New("shell needs a terminal on stdin (it puts it in raw mode): run it from an interactive terminal, or use exec for scripts and pipes")
	}
	cols, rows := termSize(fd, int(out.Fd()))
	// Taken before anything slow, so that a hang-up while the sandbox is
	// being made still ends in the clean-up below instead of killing us.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGWINCH, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	sb, done, err := c.open(cmd, 0, 0)
	if err != nil {
		return err
	}
	defer done()
	ctx := cmd.Context()
	env := map[string]string{}
	if t := os.Getenv("TERM"); termName.MatchString(t) {
		env["TERM"] = t
	}
	t, err := sb.OpenTerminal(ctx, sandboxes.TerminalOptions{Cols: cols, Rows: rows, Env: env})
	if err != nil {
		return fmt.Errorf("open a terminal in sandbox %s: %w", sb.ID(), err)
	}
	defer t.Close()
	// Whatever way this ends, the shell doesn't stay behind in a sandbox
	// that goes on (one made here is removed by done).
	defer func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shellKillWait)
		_ = t.Kill(kctx)
		cancel()
	}()

	old, err := term.MakeRaw(fd)
	if err != nil {
		return fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	// Restored on every way out, panics included; then what the terminal
	// still had queued as input (late answers to the sandbox's queries
	// among it) is dropped so that it can't reach the local shell.
	defer func() {
		_ = term.Restore(fd, old)
		flushInput(fd)
	}()

	// Keys to the sandbox. The goroutine stays blocked in Read when the
	// shell ends; the process ends right after.
	inputErr := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, rerr := in.Read(buf)
			if n > 0 {
				if _, werr := t.Write(buf[:n]); werr != nil {
					inputErr <- werr
					return
				}
			}
			if rerr != nil {
				inputErr <- fmt.Errorf("reading the terminal: %w", rerr)
				return
			}
		}
	}()
	outDone := make(chan error, 1)
	go func() {
		_, cerr := io.Copy(&termFilter{w: out}, t)
		outDone <- cerr
	}()

	for {
		select {
		case cerr := <-outDone:
			if cerr != nil {
				return fmt.Errorf("writing the terminal: %w", cerr)
			}
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shellKillWait)
			code, werr := t.Wait(wctx)
			cancel()
			if werr != nil {
				return fmt.Errorf("shell in sandbox %s: %w", sb.ID(), werr)
			}
			return shellExit(code)
		case ierr := <-inputErr:
			return fmt.Errorf("shell in sandbox %s: %w", sb.ID(), ierr)
		case s := <-sigs:
			if s == syscall.SIGWINCH {
				if cols, rows := termSize(fd, int(out.Fd())); cols > 0 {
					rctx, cancel := context.WithTimeout(ctx, shellKillWait)
					_ = t.Resize(rctx, cols, rows) // a missed resize is cosmetic
					cancel()
				}
				continue
			}
			// Raw mode turns ^C into a byte for the sandbox: a signal here
			// came from elsewhere (kill, a closed window) and ends us.
			return exitError{128 + int(s.(syscall.Signal))}
		case <-ctx.Done():
			// main's context ends on SIGINT and SIGTERM, which sigs gets
			// too: exit as that signal, whichever channel was first.
			for wait := time.After(200 * time.Millisecond); ; {
				select {
				case s := <-sigs:
					if s != syscall.SIGWINCH {
						return exitError{128 + int(s.(syscall.Signal))}
					}
					continue
				case <-wait:
				}
				break
			}
			return ctx.Err()
		}
	}
}

// termSize is the local terminal's size (of stdin, else stdout); 0x0 (the
// default size) when neither says.
func termSize(fds ...int) (cols, rows uint16) {
	for _, fd := range fds {
		w, h, err := term.GetSize(fd)
		if err == nil && w > 0 && h > 0 && w <= 0xffff && h <= 0xffff {
			return uint16(w), uint16(h)
		}
	}
	return 0, 0
}

// shellExit is the CLI's exit for the shell's status: the same, 1 when it
// has none in 0-255 (ended by a signal).
func shellExit(code int) error {
	switch {
	case code == 0:
		return nil
	case code < 0 || code > 255:
		return exitError{1}
	default:
		return exitError{code}
	}
}

// termFilter passes the sandbox's terminal output to the local terminal as
// is, colours and cursor movement included, except what reaches beyond the
// window: OSC 52 (set or read the clipboard) and OSC 50 (fonts), device
// control strings and the other string controls (DCS, SOS, PM, APC:
// requests whose answers some terminals compute from what the sandbox
// wrote, tmux passthrough), and the title reports (CSI 20 t, CSI 21 t),
// whose answer is text the sandbox chose, typed in as input. Sequences
// split across writes are handled; what it holds back is bounded.
type termFilter struct {
	w     io.Writer
	state int
	seq   []byte // an escape sequence being read, until it is judged
	drop  bool   // the OSC being read is dropped
}

const (
	tfGround  = iota
	tfC2      // 0xC2 seen: a C1 control in UTF-8 may follow
	tfEsc     // ESC seen
	tfCSI     // ESC [ …
	tfOSCNum  // OSC: reading its number
	tfOSCBody // OSC: after the number, passed or dropped
	tfOSCEsc  // OSC: ESC seen, ST if '\' follows
	tfOSCC2   // OSC: 0xC2 seen
	tfString  // DCS, SOS, PM, APC: dropped
	tfStrEsc  // in such a string: ESC seen
	tfStrC2   // in such a string: 0xC2 seen
)

// maxCSI bounds a CSI sequence held back; a longer one is no sequence a
// terminal knows, and passes as text.
const maxCSI = 64

func (f *termFilter) Write(p []byte) (int, error) {
	out := make([]byte, 0, len(p)+8)
	for _, b := range p {
		out = f.step(out, b)
	}
	if _, err := f.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// step takes one byte and returns out with what passes appended. An ESC
// ends any sequence or string being read (terminals abort it there and
// start a new one), so one can't be hidden inside another.
func (f *termFilter) step(out []byte, b byte) []byte {
	switch f.state {
	case tfGround:
		switch b {
		case 0x1b:
			f.state, f.seq = tfEsc, append(f.seq[:0], b)
		case 0xc2:
			f.state = tfC2
		default:
			out = append(out, b)
		}
	case tfC2:
		f.state = tfGround
		if b >= 0x80 && b <= 0x9f {
			// U+0080–U+009F: the 8-bit form of ESC and b-0x40, which
			// some terminals obey in UTF-8. Judged as that.
			f.state, f.seq = tfEsc, append(f.seq[:0], 0x1b)
			return f.step(out, b-0x40)
		}
		return f.step(append(out, 0xc2), b)
	case tfEsc:
		switch b {
		case '[':
			f.state, f.seq = tfCSI, append(f.seq, b)
		case ']':
			f.state, f.seq, f.drop = tfOSCNum, append(f.seq, b), false
		case 'P', 'X', '^', '_':
			f.state, f.seq = tfString, f.seq[:0]
		case 0x1b:
			out = append(out, f.seq...)
			f.seq = append(f.seq[:0], b)
		default:
			out = append(append(out, f.seq...), b)
			f.state, f.seq = tfGround, f.seq[:0]
		}
	case tfCSI:
		switch {
		case b == 0x1b:
			out = append(out, f.seq...)
			f.state, f.seq = tfEsc, append(f.seq[:0], b)
		case b == 0x18 || b == 0x1a: // CAN, SUB abort it
			out = append(append(out, f.seq...), b)
			f.state, f.seq = tfGround, f.seq[:0]
		case b >= 0x40 && b <= 0x7e:
			f.seq = append(f.seq, b)
			if !titleReport(f.seq) {
				out = append(out, f.seq...)
			}
			f.state, f.seq = tfGround, f.seq[:0]
		case b >= 0x80: // no CSI has it; a C1 control (UTF-8) aborts it
			out = append(out, f.seq...)
			f.state, f.seq = tfGround, f.seq[:0]
			return f.step(out, b)
		default:
			f.seq = append(f.seq, b)
			if len(f.seq) > maxCSI {
				out = append(out, f.seq...)
				f.state, f.seq = tfGround, f.seq[:0]
			}
		}
	case tfOSCNum:
		if b >= '0' && b <= '9' && len(f.seq) < 8 {
			f.seq = append(f.seq, b)
			return out
		}
		num := string(f.seq[2:])
		f.drop = num == "52" || num == "50"
		if !f.drop {
			out = append(out, f.seq...)
		}
		f.state, f.seq = tfOSCBody, f.seq[:0]
		return f.oscByte(out, b)
	case tfOSCBody:
		return f.oscByte(out, b)
	case tfOSCEsc:
		if b == '\\' {
			if !f.drop {
				out = append(out, 0x1b, b)
			}
			f.state = tfGround
			return out
		}
		// ESC and something else: the OSC is over (aborted) and a new
		// sequence starts.
		f.state, f.seq = tfEsc, append(f.seq[:0], 0x1b)
		return f.step(out, b)
	case tfOSCC2:
		if b >= 0x80 && b <= 0x9f { // a C1 control ends the OSC
			f.state, f.seq = tfEsc, append(f.seq[:0], 0x1b)
			return f.step(out, b-0x40)
		}
		if !f.drop {
			out = append(out, 0xc2)
		}
		f.state = tfOSCBody
		return f.oscByte(out, b)
	case tfString:
		switch b {
		case 0x1b:
			f.state = tfStrEsc
		case 0xc2:
			f.state = tfStrC2
		case 0x18, 0x1a:
			f.state = tfGround
		}
	case tfStrC2:
		switch {
		case b == 0x9c: // ST
			f.state = tfGround
		case b >= 0x80 && b <= 0x9f: // another C1 control ends it
			f.state, f.seq = tfEsc, append(f.seq[:0], 0x1b)
			return f.step(out, b-0x40)
		default:
			f.state = tfString
		}
	case tfStrEsc:
		if b == '\\' {
			f.state = tfGround
			return out
		}
		f.state, f.seq = tfEsc, append(f.seq[:0], 0x1b)
		return f.step(out, b)
	}
	return out
}

// oscByte handles a byte of an OSC's body: BEL ends it, ESC may start its
// ST, CAN and SUB abort it.
func (f *termFilter) oscByte(out []byte, b byte) []byte {
	switch b {
	case 0x07, 0x18, 0x1a:
		f.state = tfGround
	case 0x1b:
		f.state = tfOSCEsc
		return out
	case 0xc2:
		f.state = tfOSCC2
		return out
	}
	if !f.drop {
		out = append(out, b)
	}
	return out
}

// titleReport is whether seq (ESC [ … final) asks the terminal to type
// back its window or icon title: CSI 20 t or CSI 21 t.
func titleReport(seq []byte) bool {
	if seq[len(seq)-1] != 't' {
		return false
	}
	params := string(seq[2 : len(seq)-1])
	for i := 0; i < len(params); i++ {
		if params[i] == ';' {
			params = params[:i]
			break
		}
	}
	return params == "20" || params == "21"
}
