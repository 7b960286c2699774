// Package interpreter is the gllm_tools-style layer over code-sandboxes: a
// sandbox with ExecuteCode / DownloadFile / Terminate, and Interpreter, an LLM
// tool-calling loop that writes code, runs it in the sandbox and answers.
package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// ExecutionStatus is the outcome of ExecuteCode.
type ExecutionStatus string

// The statuses of gllm_tools' ExecutionStatus (lower-case values).
const (
	StatusSuccess ExecutionStatus = "success"
	StatusError   ExecutionStatus = "error"
	StatusTimeout ExecutionStatus = "timeout"
)

// MaxOutputBytes bounds each of ExecutionResult's Stdout and Stderr; past it
// the middle is cut and Truncated set.
const MaxOutputBytes = 1 << 20

// MaxDownloadBytes bounds DownloadFile.
const MaxDownloadBytes = 64 << 20

// DefaultExecutionTimeout is ExecuteCode's timeout when it is given 0.
const DefaultExecutionTimeout = 30 * time.Second

// Attachment is a file going into the sandbox (to /files/<Name>) or coming
// out of it (a downloaded file, a figure).
type Attachment struct {
	Name string `json:"name"`
	// Path is where the file is in the sandbox, when it came from one.
	Path string `json:"path,omitempty"`
	MIME string `json:"mime,omitempty"`
	Data []byte `json:"-"`
}

// ExecutionResult is gllm_tools' ExecutionResult: a failure in the code is
// data (Status error), not a Go error.
type ExecutionResult struct {
	Status ExecutionStatus `json:"status"`
	Code   string          `json:"code"`
	Stdout string          `json:"stdout"`
	Stderr string          `json:"stderr"`
	// Text is the combined output, suitable for display (and for a model):
	// stdout, the value of the last expression, stderr and the error.
	Text string `json:"text"`
	// Error is "Name: value" of the exception ("" when none).
	Error string `json:"error"`
	// ExitCode is 0 on success, 1 on error, or the code given to sys.exit.
	ExitCode int `json:"exit_code"`
	// Duration is how long the code ran; in JSON it is duration_ms, whole
	// milliseconds, as gllm_tools' ExecutionResult has it.
	Duration time.Duration `json:"-"`

	// Beyond gllm_tools: the value of the last expression (text/plain), the
	// traceback, the figures the code displayed, and whether output was cut.
	Value     string       `json:"value,omitempty"`
	Traceback string       `json:"traceback,omitempty"`
	Figures   []Attachment `json:"figures,omitempty"`
	Truncated bool         `json:"truncated,omitempty"`
}

// DurationMS is the duration in milliseconds, as gllm_tools' duration_ms.
func (r *ExecutionResult) DurationMS() int64 { return r.Duration.Milliseconds() }

// MarshalJSON adds duration_ms (gllm_tools' field) to the result's fields.
func (r ExecutionResult) MarshalJSON() ([]byte, error) {
	type plain ExecutionResult // no MarshalJSON: no recursion
	return json.Marshal(struct {
		plain
		DurationMS int64 `json:"duration_ms"`
	}{plain(r), r.DurationMS()})
}

// CodeSandbox is what the Interpreter needs of a sandbox: gllm_tools'
// BaseSandbox.
type CodeSandbox interface {
	ExecuteCode(ctx context.Context, code string, timeout time.Duration, files []Attachment) (*ExecutionResult, error)
	DownloadFile(ctx context.Context, path string) ([]byte, error)
	Terminate() error
}

// Sandbox adapts any code-sandboxes sandbox to CodeSandbox.
type Sandbox struct {
	// SB is the underlying sandbox, for everything else (Files, Commands…).
	SB *sandboxes.Sandbox
}

var _ CodeSandbox = (*Sandbox)(nil)

// Create creates a sandbox of any variant. cfg.Packages is gllm_tools'
// additional_packages: installed when the sandbox is created.
func Create(ctx context.Context, cfg sandboxes.Config) (*Sandbox, error) {
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("interpreter: create sandbox: %w", err)
	}
	return &Sandbox{SB: sb}, nil
}

// Wrap adapts an existing sandbox; Terminate will close it.
func Wrap(sb *sandboxes.Sandbox) *Sandbox { return &Sandbox{SB: sb} }

// RegisterTools grants the sandbox tools (code mode; see
// sandboxes.Sandbox.RegisterTools).
func (s *Sandbox) RegisterTools(ctx context.Context, tools ...sandboxes.Tool) error {
	return s.SB.RegisterTools(ctx, tools...)
}

// Terminate kills the sandbox.
func (s *Sandbox) Terminate() error { return s.SB.Close() }

// DownloadFile reads a file of the sandbox (at most MaxDownloadBytes).
func (s *Sandbox) DownloadFile(ctx context.Context, p string) ([]byte, error) {
	r, err := s.SB.Files().Read(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", p, err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, MaxDownloadBytes+1))
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", p, err)
	}
	if len(b) > MaxDownloadBytes {
		return nil, fmt.Errorf("download %s: %w: larger than %d bytes", p, sandboxes.ErrInvalidInput, MaxDownloadBytes)
	}
	return b, nil
}

// ExecuteCode uploads files to /files/<name>, runs code with a timeout
// (DefaultExecutionTimeout when 0) and returns its result. A Go error means
// the sandbox failed, not the code.
func (s *Sandbox) ExecuteCode(ctx context.Context, code string, timeout time.Duration, files []Attachment) (*ExecutionResult, error) {
	if timeout <= 0 {
		timeout = DefaultExecutionTimeout
	}
	opts := []sandboxes.RunOption{sandboxes.WithTimeout(timeout)}
	if len(files) > 0 {
		m := make(map[string][]byte, len(files))
		for _, f := range files {
			// A name with a directory is refused by RunCode (attachments
			// land in /files/<name>), never flattened into another's name.
			if _, dup := m[f.Name]; dup {
				return nil, fmt.Errorf("%w: two attachments named %q", sandboxes.ErrInvalidInput, f.Name)
			}
			m[f.Name] = f.Data
		}
		opts = append(opts, sandboxes.WithFiles(m))
	}
	start := time.Now()
	ex, err := s.SB.RunCode(ctx, code, opts...)
	if err != nil {
		if errors.Is(err, sandboxes.ErrTimeout) && ctx.Err() == nil {
			return &ExecutionResult{Status: StatusTimeout, Code: code, ExitCode: 1, Duration: time.Since(start),
				Error: fmt.Sprintf("TimeoutError: execution exceeded %s", timeout),
				Text:  fmt.Sprintf("TimeoutError: execution exceeded %s", timeout)}, nil
		}
		return nil, fmt.Errorf("execute code: %w", err)
	}
	r := FromExecution(code, ex)
	if r.Status == StatusTimeout && r.Error == "" {
		r.Error = fmt.Sprintf("TimeoutError: execution exceeded %s", timeout)
		r.Text = joinNonEmpty(r.Text, r.Error)
	}
	return r, nil
}

// FromExecution derives gllm_tools' result from a code-sandboxes Execution.
func FromExecution(code string, ex *sandboxes.Execution) *ExecutionResult {
	r := &ExecutionResult{Status: StatusSuccess, Code: code, Duration: ex.Duration(), Truncated: ex.Truncated}
	var cut bool
	r.Stdout, cut = clip(ex.Stdout(), MaxOutputBytes)
	r.Truncated = r.Truncated || cut
	r.Stderr, cut = clip(ex.Stderr(), MaxOutputBytes)
	r.Truncated = r.Truncated || cut
	r.Value, cut = clip(ex.Text(), MaxOutputBytes)
	r.Truncated = r.Truncated || cut
	n := 0
	for _, res := range ex.Results {
		for _, f := range []struct{ mime, ext string }{{sandboxes.MIMEPNG, "png"}, {sandboxes.MIMEJPEG, "jpg"}} {
			b := res.Data[f.mime]
			if b == nil {
				continue
			}
			var data []byte
			if f.mime == sandboxes.MIMEPNG {
				data = res.PNG()
			} else {
				data = res.JPEG()
			}
			if len(data) > 0 {
				n++
				r.Figures = append(r.Figures, Attachment{Name: fmt.Sprintf("figure-%d.%s", n, f.ext), MIME: f.mime, Data: data})
				break
			}
		}
	}
	switch {
	case ex.TimedOut:
		r.Status = StatusTimeout
	case !ex.Success():
		r.Status = StatusError
	}
	if ex.Error != nil {
		r.Error = ex.Error.Error()
		r.Traceback, _ = clip(ex.Error.Traceback, MaxOutputBytes)
	} else if ex.Interrupted && !ex.TimedOut {
		r.Error = "KeyboardInterrupt: execution interrupted"
	}
	switch {
	case ex.ExitCode != nil:
		r.ExitCode = *ex.ExitCode
		if r.ExitCode != 0 && r.Error == "" {
			r.Error = fmt.Sprintf("SystemExit: %d", r.ExitCode)
		}
	case r.Status != StatusSuccess:
		r.ExitCode = 1
	}
	errText := r.Error
	if r.Traceback != "" {
		errText = r.Traceback
		if !strings.Contains(r.Traceback, r.Error) {
			errText = joinNonEmpty(r.Traceback, r.Error)
		}
	}
	r.Text = joinNonEmpty(r.Stdout, r.Value, r.Stderr, errText)
	return r
}

func joinNonEmpty(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if strings.TrimSpace(p) == "" {
			continue
		}
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.WriteString(p)
	}
	return b.String()
}

// clip keeps the head and tail of s within max bytes (on UTF-8 boundaries).
func clip(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	const mark = "\n… [output truncated] …\n"
	keep := max - len(mark)
	if keep < 2 {
		return s[:max], true
	}
	head, tail := keep/2, keep-keep/2
	h := strings.ToValidUTF8(s[:head], "")
	t := strings.ToValidUTF8(s[len(s)-tail:], "")
	return h + mark + t, true
}
