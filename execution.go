package sandboxes

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// MIME types of rich results.
const (
	MIMEText       = "text/plain"
	MIMEHTML       = "text/html"
	MIMEMarkdown   = "text/markdown"
	MIMEJSON       = "application/json"
	MIMEPNG        = "image/png"
	MIMEJPEG       = "image/jpeg"
	MIMESVG        = "image/svg+xml"
	MIMEPDF        = "application/pdf"
	MIMELaTeX      = "text/latex"
	MIMEJavaScript = "application/javascript"
)

// fieldMIME maps E2B's result fields back to MIME types.
var fieldMIME = map[string]string{
	"text": MIMEText, "html": MIMEHTML, "markdown": MIMEMarkdown, "svg": MIMESVG,
	"png": MIMEPNG, "jpeg": MIMEJPEG, "pdf": MIMEPDF, "latex": MIMELaTeX,
	"json": MIMEJSON, "javascript": MIMEJavaScript, "data": "e2b/data", "chart": "e2b/chart",
}

// Result is one rich output: the value of the cell's last expression (main
// result) or something passed to display(). Data is keyed by MIME type; text
// formats are strings, images base64 strings, JSON values decoded.
type Result struct {
	Data         map[string]any `json:"data"`
	IsMainResult bool           `json:"is_main_result"`
	Extra        map[string]any `json:"extra,omitempty"`
}

// Text is the text/plain form.
func (r Result) Text() string { s, _ := r.Data[MIMEText].(string); return s }

// HTML is the text/html form.
func (r Result) HTML() string { s, _ := r.Data[MIMEHTML].(string); return s }

// PNG decodes the image/png form; nil if absent or malformed.
func (r Result) PNG() []byte { return r.decode(MIMEPNG) }

// JPEG decodes the image/jpeg form.
func (r Result) JPEG() []byte { return r.decode(MIMEJPEG) }

func (r Result) decode(mime string) []byte {
	s, _ := r.Data[mime].(string)
	if s == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil
	}
	return b
}

// Formats lists the MIME types present.
func (r Result) Formats() []string {
	out := make([]string, 0, len(r.Data))
	for k := range r.Data {
		out = append(out, k)
	}
	return out
}

// OutputMessage is one chunk of stdout or stderr as it arrived: whole lines
// for what Python prints (the kernel line-buffers it), but output of child
// processes can arrive split mid-line. Execution.Stdout() joins them.
type OutputMessage struct {
	Line      string    `json:"line"`
	Timestamp time.Time `json:"timestamp"`
	Error     bool      `json:"error"` // true for stderr
}

// Logs are an execution's output lines.
type Logs struct {
	Stdout []OutputMessage `json:"stdout"`
	Stderr []OutputMessage `json:"stderr"`
}

// ExecutionError is an exception raised by the user's code: data, not a Go error.
type ExecutionError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

func (e *ExecutionError) Error() string { return e.Name + ": " + e.Value }

// Execution is the outcome of RunCode.
type Execution struct {
	Results        []Result        `json:"results"`
	Logs           Logs            `json:"logs"`
	Error          *ExecutionError `json:"error,omitempty"`
	ExecutionCount int             `json:"execution_count"`
	// ExitCode is set when the code called sys.exit.
	ExitCode    *int      `json:"exit_code,omitempty"`
	Interrupted bool      `json:"interrupted"`
	TimedOut    bool      `json:"timed_out"`
	ContextID   string    `json:"context_id,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	CompletedAt time.Time `json:"completed_at"`
	// Truncated says the client dropped output past its memory bound.
	Truncated bool `json:"truncated,omitempty"`

	stdout, stderr strings.Builder
}

// Text is the text/plain form of the main result ("" if none).
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMainResult {
			return r.Text()
		}
	}
	return ""
}

// Stdout is everything the execution printed to stdout.
func (e *Execution) Stdout() string { return e.stdout.String() }

// Stderr is everything the execution printed to stderr.
func (e *Execution) Stderr() string { return e.stderr.String() }

// Success is true when the code raised nothing, was not interrupted and did
// not exit with a non-zero code.
func (e *Execution) Success() bool {
	return e.Error == nil && !e.Interrupted && !e.TimedOut && (e.ExitCode == nil || *e.ExitCode == 0)
}

// Duration is how long the execution took.
func (e *Execution) Duration() time.Duration { return e.CompletedAt.Sub(e.StartedAt) }

func resultFromFields(fields map[string]json.RawMessage, extra map[string]json.RawMessage, main bool) Result {
	r := Result{Data: map[string]any{}, IsMainResult: main}
	for f, raw := range fields {
		mime, ok := fieldMIME[f]
		if !ok {
			mime = f
		}
		var v any
		if json.Unmarshal(raw, &v) == nil {
			r.Data[mime] = v
		}
	}
	for k, raw := range extra {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			continue
		}
		if strings.Contains(k, "/") {
			// Unknown MIME types travel in "extra" (E2B's mapping); they are data.
			r.Data[k] = v
		} else {
			if r.Extra == nil {
				r.Extra = map[string]any{}
			}
			r.Extra[k] = v
		}
	}
	return r
}
