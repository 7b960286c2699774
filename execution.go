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
	// MIMEChart is E2B's chart JSON for a matplotlib figure (Result.Chart).
	MIMEChart = "e2b/chart"
	// MIMEData is E2B's {column: values} form of a pandas DataFrame.
	MIMEData = "e2b/data"
)

// fieldMIME maps E2B's result fields back to MIME types.
var fieldMIME = map[string]string{
	"text": MIMEText, "html": MIMEHTML, "markdown": MIMEMarkdown, "svg": MIMESVG,
	"png": MIMEPNG, "jpeg": MIMEJPEG, "pdf": MIMEPDF, "latex": MIMELaTeX,
	"json": MIMEJSON, "javascript": MIMEJavaScript, "data": MIMEData, "chart": MIMEChart,
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

// Markdown is the text/markdown form.
func (r Result) Markdown() string { s, _ := r.Data[MIMEMarkdown].(string); return s }

// SVG is the image/svg+xml form (SVG source text).
func (r Result) SVG() string { s, _ := r.Data[MIMESVG].(string); return s }

// LaTeX is the text/latex form.
func (r Result) LaTeX() string { s, _ := r.Data[MIMELaTeX].(string); return s }

// JavaScript is the application/javascript form.
func (r Result) JavaScript() string { s, _ := r.Data[MIMEJavaScript].(string); return s }

// PDF decodes the application/pdf form; nil if absent or malformed.
func (r Result) PDF() []byte { return r.decode(MIMEPDF) }

// JSON is the application/json form, decoded (nil if absent).
func (r Result) JSON() any { return r.Data[MIMEJSON] }

// DataFrame is the e2b/data form of a pandas DataFrame: column name → values
// (numbers, strings, bools, ISO timestamps, nil for NaN/NaT); nil if absent.
func (r Result) DataFrame() map[string][]any {
	m, ok := r.Data[MIMEData].(map[string]any)
	if !ok {
		return nil
	}
	out := make(map[string][]any, len(m))
	for k, v := range m {
		col, _ := v.([]any)
		out[k] = col
	}
	return out
}

// Chart is the e2b/chart form of a matplotlib figure, decoded; nil if the
// result has none (not a figure, or a blank one).
func (r Result) Chart() *Chart {
	v, ok := r.Data[MIMEChart]
	if !ok || v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var c Chart
	if json.Unmarshal(b, &c) != nil || c.Type == "" {
		return nil
	}
	return &c
}

// Chart types (E2B's ChartType).
const (
	ChartLine          = "line"
	ChartScatter       = "scatter"
	ChartBar           = "bar"
	ChartPie           = "pie"
	ChartBoxAndWhisker = "box_and_whisker"
	ChartSuperchart    = "superchart"
	ChartUnknown       = "unknown"
)

// Chart is E2B's chart JSON, as its code interpreter SDK types it. Which
// fields are set depends on Type: line and scatter have the axes' scales,
// ticks and Elements with Points; bar Elements have Value and Group; pie
// Elements Angle and Radius; box_and_whisker Elements the five numbers and
// Outliers; a superchart (several axes) has Charts instead of Elements;
// unknown has only its title.
type Chart struct {
	Type  string `json:"type"`
	Title string `json:"title"`

	XLabel string `json:"x_label,omitempty"`
	YLabel string `json:"y_label,omitempty"`
	XUnit  string `json:"x_unit,omitempty"`
	YUnit  string `json:"y_unit,omitempty"`

	// XScale/YScale: linear, datetime, categorical, log, symlog, logit, ...
	XScale      string   `json:"x_scale,omitempty"`
	YScale      string   `json:"y_scale,omitempty"`
	XTicks      []any    `json:"x_ticks,omitempty"` // numbers, or strings on datetime/categorical axes
	YTicks      []any    `json:"y_ticks,omitempty"`
	XTickLabels []string `json:"x_tick_labels,omitempty"`
	YTickLabels []string `json:"y_tick_labels,omitempty"`

	Elements []ChartElement `json:"-"`
	Charts   []Chart        `json:"-"` // superchart: one chart per axes
}

// ChartElement is one series (line, scatter), bar, pie slice or box.
type ChartElement struct {
	Label string `json:"label"`
	// Points are [x, y] pairs: numbers, ISO timestamps or categories.
	Points [][2]any `json:"points,omitempty"`
	// Bar.
	Value *float64 `json:"value,omitempty"`
	Group string   `json:"group,omitempty"`
	// Pie: the slice's angle in degrees, and its radius.
	Angle  float64 `json:"angle,omitempty"`
	Radius float64 `json:"radius,omitempty"`
	// Box and whisker.
	Min           *float64  `json:"min,omitempty"`
	FirstQuartile *float64  `json:"first_quartile,omitempty"`
	Median        *float64  `json:"median,omitempty"`
	ThirdQuartile *float64  `json:"third_quartile,omitempty"`
	Max           *float64  `json:"max,omitempty"`
	Outliers      []float64 `json:"outliers,omitempty"`
}

// UnmarshalJSON reads "elements" as charts for a superchart, else as
// elements.
func (c *Chart) UnmarshalJSON(b []byte) error {
	type plain Chart
	var aux struct {
		plain
		Title    *string         `json:"title"`
		Elements json.RawMessage `json:"elements"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*c = Chart(aux.plain)
	if aux.Title != nil {
		c.Title = *aux.Title
	}
	if len(aux.Elements) == 0 || string(aux.Elements) == "null" {
		return nil
	}
	if c.Type == ChartSuperchart {
		return json.Unmarshal(aux.Elements, &c.Charts)
	}
	return json.Unmarshal(aux.Elements, &c.Elements)
}

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

// MarshalJSON writes an empty list as [] (as E2B's Execution.to_json and
// its JS SDK's toJSON), never null.
func (e *Execution) MarshalJSON() ([]byte, error) {
	type plain Execution // without this method
	return json.Marshal(struct {
		*plain
		Results []Result `json:"results"`
	}{(*plain)(e), nonNil(e.Results)})
}

// MarshalJSON writes stdout and stderr without lines as [], never null.
func (l Logs) MarshalJSON() ([]byte, error) {
	type plain Logs
	return json.Marshal(plain{Stdout: nonNil(l.Stdout), Stderr: nonNil(l.Stderr)})
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
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

// plainJSONString decodes a JSON string whose inside is printable ASCII
// without a quote or a backslash (a result's text is, most of the time: 42,
// 'abc', <Figure ...>) without encoding/json, which took 2.0-3.7 µs and 6
// allocations of every round trip's result here (0.7-1.1 µs and 4 with it,
// the whole resultFromFields); anything else reports false.
func plainJSONString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	for _, c := range in {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return "", false
		}
	}
	return string(in), true
}

func resultFromFields(fields map[string]json.RawMessage, extra map[string]json.RawMessage, main bool) Result {
	r := Result{Data: map[string]any{}, IsMainResult: main}
	for f, raw := range fields {
		mime, ok := fieldMIME[f]
		if !ok {
			mime = f
		}
		if t, ok := plainJSONString(raw); ok {
			r.Data[mime] = t
			continue
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
