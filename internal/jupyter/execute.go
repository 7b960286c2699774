package jupyter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// interruptGrace is how long a timed-out execution may take to stop once
// interrupted before its kernel is restarted.
const interruptGrace = 5 * time.Second

// mimeField maps MIME types to the result fields of the execution stream
// (E2B's names); other types travel in "extra", keyed by MIME type.
var mimeField = map[string]string{
	"text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/svg+xml": "svg",
	"image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf", "text/latex": "latex",
	"application/json": "json", "application/javascript": "javascript",
}

type line = map[string]any

// outcome is how an execution ended.
type outcome struct {
	count                             int
	errName, errValue                 string
	interrupted, timedOut, kernelDied bool
}

// execute runs code on k's kernel, calling emit with every line of the
// execution stream (our agent's NDJSON, end_of_execution excluded). An
// exception in the code is an "error" line, not an error.
func (i *instance) execute(ctx context.Context, k *kctx, code string, env map[string]string, timeout time.Duration, emit func(line) error) error {
	if err := k.acquire(ctx); err != nil {
		return err
	}
	defer k.release()
	kc, err := k.conn(ctx, i.c)
	if err != nil {
		return err
	}
	if err := i.init(ctx, k, kc); err != nil {
		return err
	}
	if len(env) > 0 {
		if k.language != "python" {
			return fmt.Errorf("%w: per-execution environment variables on a %s kernel: the jupyter variant sets them with Python code; use a python context", sberr.ErrNotSupported, k.language)
		}
		restore, err := i.setEnv(ctx, kc, env)
		if err != nil {
			return err
		}
		defer func() { _, _ = i.runQuiet(context.WithoutCancel(ctx), kc, restore, 30*time.Second) }()
	}
	k.running.Store(true)
	defer k.running.Store(false)
	o, err := i.run(ctx, k, kc, code, timeout, emit)
	if err != nil {
		return err
	}
	if o.count > 0 {
		if err := emit(line{"type": "number_of_executions", "execution_count": o.count}); err != nil {
			return err
		}
	}
	return emit(line{"type": "execution_status", "interrupted": o.interrupted, "timed_out": o.timedOut, "kernel_died": o.kernelDied})
}

// run sends one execute_request and relays its answers until the kernel's
// execute_reply and its return to idle.
func (i *instance) run(ctx context.Context, k *kctx, kc *kernelConn, code string, timeout time.Duration, emit func(line) error) (outcome, error) {
	var o outcome
	w, stop, err := kc.request(ctx, "shell", "execute_request", map[string]any{
		"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{},
		// stop_on_error would make the kernel abort the requests that
		// reach it just after an error (a notebook's queued cells): ours
		// come one at a time, and the next one, sent right after an
		// interrupt's KeyboardInterrupt, came back aborted and empty.
		"allow_stdin": false, "stop_on_error": false,
	})
	if err != nil {
		return o, err
	}
	defer stop()
	var deadline, grace <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	gotReply, gotIdle := false, false
	for !gotReply || !gotIdle {
		var m *message
		select {
		case m = <-w.ch:
		case <-deadline:
			// Interrupt first; a kernel deaf to SIGINT is restarted.
			o.timedOut = true
			deadline = nil
			_ = i.c.call(ctx, "interrupt a kernel", http.MethodPost, "/api/kernels/"+url.PathEscape(k.kernelID)+"/interrupt", nil, nil)
			grace = time.After(interruptGrace)
			continue
		case <-grace:
			grace = nil
			// The server tells no waiter of a restart it was asked for:
			// the execution ends here, with its kernel.
			if err := i.restartContext(ctx, k); err != nil {
				return o, fmt.Errorf("restarting the kernel after the execution's timeout: %w", err)
			}
			o.kernelDied = true
			return o, nil
		case <-ctx.Done():
			// The caller went away: don't leave the code running.
			ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_ = i.c.call(ictx, "interrupt a kernel", http.MethodPost, "/api/kernels/"+url.PathEscape(k.kernelID)+"/interrupt", nil, nil)
			cancel()
			return o, ctx.Err()
		case <-kc.dead:
			kc.mu.Lock()
			err := kc.err
			kc.mu.Unlock()
			return o, err
		}
		var err error
		switch m.Header.MsgType {
		case "execute_reply":
			gotReply = true
			var c struct {
				Count  int    `json:"execution_count"`
				Status string `json:"status"`
			}
			_ = json.Unmarshal(m.Content, &c)
			o.count = c.Count
			if c.Status == "aborted" {
				// Never an empty success: the code did not run.
				err = emit(line{"type": "error", "name": "ExecutionAborted", "value": "the kernel aborted the execution without running it (after an error in an earlier one); run it again", "traceback": []string{}})
			}
		case "status":
			var c struct {
				State string `json:"execution_state"`
			}
			_ = json.Unmarshal(m.Content, &c)
			switch c.State {
			case "idle":
				if m.ParentHeader.MsgID != "" {
					gotIdle = true
				}
			case "restarting", "dead", "autorestarting":
				o.kernelDied = true
				k.mu.Lock()
				k.needInit = len(i.env) > 0
				k.mu.Unlock()
				if !o.timedOut {
					err = emit(line{"type": "error", "name": "KernelDied", "value": "the kernel died or restarted during the execution; its state is lost", "traceback": []string{}})
				}
				return o, err
			}
		case "stream":
			var c struct {
				Name string `json:"name"`
				Text string `json:"text"`
			}
			_ = json.Unmarshal(m.Content, &c)
			typ := "stdout"
			if c.Name == "stderr" {
				typ = "stderr"
			}
			err = emit(line{"type": typ, "text": c.Text, "timestamp": time.Now().UTC().Format(time.RFC3339Nano)})
		case "execute_result", "display_data":
			var c struct {
				Data     map[string]json.RawMessage `json:"data"`
				Metadata map[string]json.RawMessage `json:"metadata"`
			}
			_ = json.Unmarshal(m.Content, &c)
			l := line{"type": "result", "is_main_result": m.Header.MsgType == "execute_result"}
			extra := map[string]json.RawMessage{}
			for mime, v := range c.Data {
				if f, ok := mimeField[mime]; ok {
					l[f] = v
				} else if strings.Contains(mime, "/") {
					extra[mime] = v
				}
			}
			if len(extra) > 0 {
				l["extra"] = extra
			}
			err = emit(l)
		case "error":
			var c struct {
				Name      string   `json:"ename"`
				Value     string   `json:"evalue"`
				Traceback []string `json:"traceback"`
			}
			_ = json.Unmarshal(m.Content, &c)
			o.errName, o.errValue = c.Name, c.Value
			if c.Name == "KeyboardInterrupt" {
				o.interrupted = true
			}
			if c.Traceback == nil {
				c.Traceback = []string{}
			}
			err = emit(line{"type": "error", "name": c.Name, "value": c.Value, "traceback": c.Traceback})
		}
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

// runQuiet runs code without history and returns what it printed to
// stdout (bounded); an exception is an *codeError.
func (i *instance) runQuiet(ctx context.Context, kc *kernelConn, code string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w, stop, err := kc.request(ctx, "shell", "execute_request", map[string]any{
		"code": code, "silent": false, "store_history": false, "user_expressions": map[string]any{},
		"allow_stdin": false, "stop_on_error": false,
	})
	if err != nil {
		return "", err
	}
	defer stop()
	var out strings.Builder
	var cerr error
	gotReply, gotIdle := false, false
	for !gotReply || !gotIdle {
		m, err := kc.next(ctx, w)
		if err != nil {
			return "", err
		}
		switch m.Header.MsgType {
		case "execute_reply":
			gotReply = true
		case "status":
			var c struct {
				State string `json:"execution_state"`
			}
			_ = json.Unmarshal(m.Content, &c)
			switch c.State {
			case "idle":
				gotIdle = true
			case "restarting", "dead", "autorestarting":
				return "", fmt.Errorf("%w: %w", sberr.ErrUnavailable, errKernelDied)
			}
		case "stream":
			var c struct {
				Name string `json:"name"`
				Text string `json:"text"`
			}
			_ = json.Unmarshal(m.Content, &c)
			if c.Name == "stdout" {
				if out.Len()+len(c.Text) > maxMessageBytes {
					return "", fmt.Errorf("%w: the answer exceeds %d bytes", sberr.ErrInvalidInput, maxMessageBytes)
				}
				out.WriteString(c.Text)
			}
		case "error":
			var c struct {
				Name  string `json:"ename"`
				Value string `json:"evalue"`
			}
			_ = json.Unmarshal(m.Content, &c)
			cerr = &codeError{name: c.Name, value: c.Value}
		}
	}
	return out.String(), cerr
}

// codeError is an exception raised by code this variant ran itself.
type codeError struct{ name, value string }

func (e *codeError) Error() string { return e.name + ": " + e.value }

// init applies the sandbox's environment variables to a new (or
// restarted) kernel.
func (i *instance) init(ctx context.Context, k *kctx, kc *kernelConn) error {
	k.mu.Lock()
	need := k.needInit
	k.mu.Unlock()
	if !need || len(i.env) == 0 {
		return nil
	}
	if _, err := i.setEnv(ctx, kc, i.env); err != nil {
		return err
	}
	k.mu.Lock()
	k.needInit = false
	k.mu.Unlock()
	return nil
}

// setEnv sets environment variables in a Python kernel; it returns the
// code that restores their previous values.
func (i *instance) setEnv(ctx context.Context, kc *kernelConn, env map[string]string) (string, error) {
	b, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	enc := base64.StdEncoding.EncodeToString(b)
	// The values travel base64-encoded: no quoting of untrusted text into code.
	code := "import os as _cs_os, json as _cs_json, base64 as _cs_b64\n" +
		"_cs_env = _cs_json.loads(_cs_b64.b64decode('" + enc + "'))\n" +
		"_cs_saved = {k: _cs_os.environ.get(k) for k in _cs_env}\n" +
		"_cs_os.environ.update(_cs_env)\n" +
		"print(_cs_json.dumps(_cs_saved))\n" +
		"del _cs_os, _cs_json, _cs_b64, _cs_env, _cs_saved\n"
	out, err := i.runQuiet(ctx, kc, code, 30*time.Second)
	if err != nil {
		return "", fmt.Errorf("setting environment variables: %w", err)
	}
	saved := strings.TrimSpace(out)
	if !json.Valid([]byte(saved)) {
		return "", fmt.Errorf("%w: setting environment variables: unexpected answer", sberr.ErrUnavailable)
	}
	restore := "import os as _cs_os, json as _cs_json, base64 as _cs_b64\n" +
		"for _cs_k, _cs_v in _cs_json.loads(_cs_b64.b64decode('" + base64.StdEncoding.EncodeToString([]byte(saved)) + "')).items():\n" +
		"    _cs_os.environ.pop(_cs_k, None) if _cs_v is None else _cs_os.environ.__setitem__(_cs_k, _cs_v)\n" +
		"del _cs_os, _cs_json, _cs_b64\n"
	return restore, nil
}

// identifier is a Python name this variant reads or sets (ASCII only).
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,254}$`)

var pyKeywords = map[string]bool{"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true,
	"async": true, "await": true, "break": true, "class": true, "continue": true, "def": true, "del": true,
	"elif": true, "else": true, "except": true, "finally": true, "for": true, "from": true, "global": true,
	"if": true, "import": true, "in": true, "is": true, "lambda": true, "nonlocal": true, "not": true,
	"or": true, "pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true}

func checkName(name string) error {
	if !identifier.MatchString(name) || pyKeywords[name] {
		return fmt.Errorf("%w: variable name %q: give a Python identifier (ASCII letters, digits, _)", sberr.ErrInvalidInput, name)
	}
	return nil
}

// variableCall runs a variable operation in k's kernel (Python only).
func (i *instance) variableCall(ctx context.Context, k *kctx, code string) (string, error) {
	if k.language != "python" {
		return "", fmt.Errorf("%w: variables of a %s kernel: the jupyter variant reads and sets variables with Python code", sberr.ErrNotSupported, k.language)
	}
	if err := k.acquire(ctx); err != nil {
		return "", err
	}
	defer k.release()
	kc, err := k.conn(ctx, i.c)
	if err != nil {
		return "", err
	}
	if err := i.init(ctx, k, kc); err != nil {
		return "", err
	}
	return i.runQuiet(ctx, kc, code, 2*time.Minute)
}

// getVariable reads a variable as JSON, or its repr when JSON can't
// encode it.
func (i *instance) getVariable(ctx context.Context, k *kctx, name string) (json.RawMessage, bool, error) {
	if err := checkName(name); err != nil {
		return nil, false, err
	}
	code := "import json as _cs_json, sys as _cs_sys\n" +
		"try:\n" +
		"    _cs_out = _cs_json.dumps({'value': " + name + "}, allow_nan=False)\n" +
		"except (TypeError, ValueError, OverflowError, RecursionError):\n" +
		"    _cs_out = _cs_json.dumps({'repr': repr(" + name + ")})\n" +
		"_cs_sys.stdout.write('\\n' + _cs_out + '\\n')\n" +
		"del _cs_json, _cs_sys, _cs_out\n"
	out, err := i.variableCall(ctx, k, code)
	var ce *codeError
	if errors.As(err, &ce) && ce.name == "NameError" {
		return nil, false, fmt.Errorf("variable %s: %w in context %s", name, sberr.ErrNotFound, k.id)
	}
	if err != nil {
		return nil, false, err
	}
	// The answer is the last line: whatever a __repr__ printed comes first.
	out = strings.TrimRight(out, "\n")
	if n := strings.LastIndexByte(out, '\n'); n >= 0 {
		out = out[n+1:]
	}
	var v struct {
		Value json.RawMessage `json:"value"`
		Repr  *string         `json:"repr"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return nil, false, fmt.Errorf("%w: variable %s: unexpected answer from the kernel", sberr.ErrUnavailable, name)
	}
	if v.Repr != nil {
		r, _ := json.Marshal(*v.Repr)
		return r, true, nil
	}
	return v.Value, false, nil
}

// setVariable sets a variable from JSON, or to bytes.
func (i *instance) setVariable(ctx context.Context, k *kctx, name string, value []byte, isBytes bool) error {
	if err := checkName(name); err != nil {
		return err
	}
	if !isBytes && !json.Valid(value) {
		return fmt.Errorf("%w: variable %s: the value is not JSON", sberr.ErrInvalidInput, name)
	}
	enc := base64.StdEncoding.EncodeToString(value)
	code := name + " = __import__('base64').b64decode('" + enc + "')\n"
	if !isBytes {
		code = name + " = __import__('json').loads(__import__('base64').b64decode('" + enc + "'))\n"
	}
	_, err := i.variableCall(ctx, k, code)
	return err
}
