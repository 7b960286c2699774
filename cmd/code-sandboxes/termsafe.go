package main

import (
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"golang.org/x/term"
)

// termSafe escapes the terminal control characters of what it writes:
// sandbox output reaching a terminal raw could move the cursor, rewrite
// what the user saw, set the window title or write the clipboard (OSC 52).
// Newlines, tabs and carriage returns (progress bars) pass; every other C0
// control, DEL, C1 control (U+0080–U+009F) and invalid UTF-8 byte is
// written as a visible \xNN or \u00NN escape.
type termSafe struct{ w io.Writer }

func (t termSafe) Write(p []byte) (int, error) {
	buf := make([]byte, 0, len(p)+16)
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			buf = fmt.Appendf(buf, `\x%02x`, p[i])
		case r == '\n' || r == '\t' || r == '\r':
			buf = append(buf, byte(r))
		case r < 0x20 || r == 0x7f:
			buf = fmt.Appendf(buf, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			buf = fmt.Appendf(buf, `\u%04x`, r)
		default:
			buf = append(buf, p[i:i+size]...)
		}
		i += size
	}
	if _, err := t.w.Write(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// terminalSafe wraps f in termSafe when it is a terminal; output to files
// and pipes stays byte for byte.
func terminalSafe(f *os.File) io.Writer {
	if term.IsTerminal(int(f.Fd())) {
		return termSafe{f}
	}
	return f
}
