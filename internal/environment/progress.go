package environment

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"

	"github.com/code-sandboxes/code-sandboxes/internal/units"
)

// progress reports a build: on a terminal a live bar (steps, or bytes while
// unpacking), elsewhere one plain line per step, so logs stay readable.
type progress struct {
	w   io.Writer
	tty bool
	bar *progressbar.ProgressBar
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		p.tty = true
	}
	return p
}

func (p *progress) linef(format string, a ...any) {
	if p.w == nil {
		return
	}
	p.clear()
	fmt.Fprintf(p.w, format+"\n", a...)
}

func (p *progress) clear() {
	if p.bar != nil {
		_ = p.bar.Clear()
	}
}

// step starts step i of n.
func (p *progress) step(i, n int, name string) {
	if p.w == nil {
		return
	}
	if !p.tty {
		fmt.Fprintf(p.w, "  [%d/%d] %s\n", i, n, name)
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions(n, progressbar.OptionSetWriter(p.w), progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(false), progressbar.OptionFullWidth(), progressbar.OptionSpinnerType(14),
			progressbar.OptionThrottle(100*time.Millisecond))
	}
	_ = p.bar.Set(i - 1)
	p.bar.Describe(name)
}

// done completes the step bar.
func (p *progress) done() {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
		p.bar = nil
	}
}

// activity is fed a command's output: on a terminal it keeps the spinner
// turning, so a long apt run doesn't look hung.
func (p *progress) activity() io.Writer {
	if p.bar == nil {
		return io.Discard
	}
	return writerFunc(func(b []byte) (int, error) {
		_ = p.bar.RenderBlank()
		return len(b), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// byteCounter counts bytes through a stream, shown as a bytes bar on a
// terminal and as one summary line otherwise.
type byteCounter struct {
	p     *progress
	bar   *progressbar.ProgressBar
	what  string
	n     int64
	start time.Time
}

func (p *progress) bytes(what string, total int64) *byteCounter {
	c := &byteCounter{p: p, what: what, start: time.Now()}
	if p.tty {
		p.clear()
		// total is the compressed size; the stream is uncompressed, so the
		// bar shows a count rather than a misleading percentage.
		c.bar = progressbar.NewOptions64(-1, progressbar.OptionSetWriter(p.w), progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription(fmt.Sprintf("%s (%s compressed)", what, units.Bytes(total))),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	return c
}

func (c *byteCounter) Write(b []byte) (int, error) {
	c.n += int64(len(b))
	if c.bar != nil {
		_ = c.bar.Add(len(b))
	}
	return len(b), nil
}

func (c *byteCounter) finish() {
	if c.bar != nil {
		_ = c.bar.Finish()
	}
	if c.p.w != nil && !c.p.tty {
		fmt.Fprintf(c.p.w, "        %s: %s in %s\n", c.what, units.Bytes(c.n), time.Since(c.start).Round(time.Millisecond))
	}
}
