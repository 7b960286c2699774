// Executions: the request, the NDJSON stream's lines and their bounded decoding.

package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// ExecuteRequest is the body of POST /execute.
type ExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
	Timeout   float64           `json:"timeout,omitempty"` // our extension, seconds
}

// Line is one NDJSON line of an execution stream.
type Line struct {
	Type           string
	Text           string // stdout/stderr
	Timestamp      time.Time
	IsMainResult   bool
	Data           map[string]json.RawMessage // result: field -> raw value, as sent (text, html, png, …)
	Extra          map[string]json.RawMessage
	Name, Value    string
	Traceback      string
	ExecutionCount int
	ExitCode       int
	// execution_status (our extension)
	Interrupted, TimedOut, KernelDied bool
}

// ErrProtocol is a stream the client can't make sense of.
var ErrProtocol = errors.New("protocol error")

// DecodeLine parses one NDJSON line. It accepts both our agent's and E2B's
// server's spellings; the line is untrusted input.
func DecodeLine(b []byte) (Line, error) {
	if l, ok := fastLine(b); ok {
		return l, nil
	}
	return decodeLine(b)
}

// decodeLine is DecodeLine for any layout.
func decodeLine(b []byte) (Line, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Line{}, fmt.Errorf("%w: invalid NDJSON line: %w", ErrProtocol, err)
	}
	var l Line
	if err := json.Unmarshal(raw["type"], &l.Type); err != nil || l.Type == "" {
		return Line{}, fmt.Errorf("%w: line without a type", ErrProtocol)
	}
	str := func(k string) string {
		var s string
		if v, ok := raw[k]; ok {
			_ = json.Unmarshal(v, &s)
		}
		return s
	}
	switch l.Type {
	case "stdout", "stderr":
		l.Text = str("text")
		if ts := str("timestamp"); ts != "" {
			l.Timestamp, _ = time.Parse(time.RFC3339Nano, ts)
		}
		if v, ok := raw["timestamp"]; ok && l.Timestamp.IsZero() {
			var f float64
			if json.Unmarshal(v, &f) == nil && f > 0 {
				// E2B's JS fixtures carry epoch milliseconds or nanoseconds.
				switch {
				case f > 1e17:
					l.Timestamp = time.Unix(0, int64(f))
				case f > 1e11:
					l.Timestamp = time.UnixMilli(int64(f))
				default:
					l.Timestamp = time.Unix(int64(f), 0)
				}
			}
		}
	case "result":
		_ = json.Unmarshal(raw["is_main_result"], &l.IsMainResult)
		l.Data = map[string]json.RawMessage{}
		for k, v := range raw {
			switch k {
			case "type", "is_main_result":
			case "extra":
				_ = json.Unmarshal(v, &l.Extra)
			default:
				if string(v) != "null" {
					l.Data[k] = v
				}
			}
		}
	case "error":
		l.Name, l.Value = str("name"), str("value")
		if v, ok := raw["traceback"]; ok {
			var lines []string
			if json.Unmarshal(v, &lines) == nil {
				l.Traceback = strings.Join(lines, "\n")
			} else {
				l.Traceback = str("traceback")
			}
		}
	case "number_of_executions":
		_ = json.Unmarshal(raw["execution_count"], &l.ExecutionCount)
	case "exit_code":
		_ = json.Unmarshal(raw["exit_code"], &l.ExitCode)
	case "execution_status":
		_ = json.Unmarshal(raw["interrupted"], &l.Interrupted)
		_ = json.Unmarshal(raw["timed_out"], &l.TimedOut)
		_ = json.Unmarshal(raw["kernel_died"], &l.KernelDied)
	}
	return l, nil
}

// Execute runs code and calls fn for every line, live, until the stream's
// end_of_execution. A stream that ends without it is an error.
func (c *Client) Execute(ctx context.Context, req ExecuteRequest, fn func(Line)) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("execute: %w", err)
	}
	if c.o.Dial != nil {
		if err := c.executeConn(ctx, b, fn); !errors.Is(err, errNoExecConn) {
			return err
		}
	}
	resp, err := c.do(ctx, "execute", http.MethodPost, c.o.InterpreterURL+"/execute", c.interpHeaders(), bytes.NewReader(b), "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := ReadStream(ctx, resp.Body, c.o.MaxLineBytes, fn); err != nil {
		return err
	}
	// Read the (empty) rest so the connection is reused: closing a body
	// before EOF drops the connection, which the server takes for a client
	// that went away.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return nil
}

// ReadStream decodes an NDJSON execution stream with bounded lines.
func ReadStream(ctx context.Context, r io.Reader, maxLine int, fn func(Line)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readBoundedLine(br, maxLine)
		if len(bytes.TrimSpace(line)) > 0 {
			l, derr := DecodeLine(line)
			if derr != nil {
				return fmt.Errorf("execute: %w", derr)
			}
			if l.Type == "end_of_execution" {
				return nil
			}
			fn(l)
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("execute: %w", ctx.Err())
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("execute: %w: the stream ended before end_of_execution (the sandbox may have been killed or expired)", sberr.ErrUnavailable)
			}
			return fmt.Errorf("execute: %w", err)
		}
	}
}

func readBoundedLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > max {
			return nil, fmt.Errorf("%w: an output line exceeds %d bytes", ErrProtocol, max)
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, err
	}
}
