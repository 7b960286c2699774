package interpreter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/interpreter"
	"github.com/code-sandboxes/code-sandboxes/local"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

var (
	shared     *interpreter.Sandbox
	sharedErr  error
	sharedOnce sync.Once
	runtime    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.Terminate(); err != nil {
			println("terminate:", err.Error())
			code = 1
		}
	}
	if runtime != "" {
		os.RemoveAll(runtime)
	}
	os.Exit(code)
}

// sandbox returns the package's one local sandbox (creating sandboxes is
// the slow part; scenarios don't depend on a fresh kernel).
func sandbox(t *testing.T) *interpreter.Sandbox {
	t.Helper()
	if testing.Short() {
		t.Skip("creates a sandbox")
	}
	sandboxestest.Require(t, exec.Command("/usr/bin/python3", "-c", "import numpy, matplotlib").Run() == nil,
		"the sandbox's /usr/bin/python3 needs numpy and matplotlib (make deps)")
	sharedOnce.Do(func() {
		runtime, sharedErr = os.MkdirTemp("", "cs-interp-")
		if sharedErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared, sharedErr = interpreter.Create(ctx, sandboxes.Config{Options: local.Options{RuntimeDir: runtime}, MaxLifetime: 10 * time.Minute})
	})
	if sharedErr != nil {
		t.Fatalf("create sandbox: %v", sharedErr)
	}
	return shared
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var providers = []string{"openai", "anthropic"}

const histCode = `import os
import numpy as np
import matplotlib.pyplot as plt
data = np.loadtxt('/files/data.csv', delimiter=',', skiprows=1)
os.makedirs('/files/output', exist_ok=True)
plt.figure()
plt.hist(data, bins=10)
plt.title('values')
plt.savefig('/files/output/hist.png')
plt.show()
print('n =', len(data), 'mean =', round(float(data.mean()), 2))`

func TestHistogramAttachment(t *testing.T) {
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			sb := sandbox(t)
			fm := newFakeModel(t, p,
				turn{code: histCode},
				turn{expect: "n = 6 mean = 3.5", wantImage: true,
					text: "The histogram of the 6 values (mean 3.5): [hist.png](sandbox:/files/output/hist.png)"})
			it := interpreter.New(sb, fm.client(t))
			csv := []byte("value\n1\n2\n3\n4\n5\n6\n")
			out, err := it.Execute(ctxT(t, 40*time.Second), "Plot a histogram of /files/data.csv", []interpreter.Attachment{{Name: "data.csv", Data: csv}})
			fm.check()
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if !strings.Contains(out.Text, "sandbox:/files/output/hist.png") || out.Steps != 2 {
				t.Errorf("text %q after %d steps", out.Text, out.Steps)
			}
			if len(out.Executions) != 1 {
				t.Fatalf("%d executions, want 1", len(out.Executions))
			}
			ex := out.Executions[0]
			if ex.Code != histCode || ex.Result == nil || ex.Result.Status != interpreter.StatusSuccess || len(ex.Result.Figures) != 1 {
				t.Errorf("execution %+v", ex)
			}
			if len(out.Attachments) != 1 {
				t.Fatalf("attachments %v, missing %v", out.Attachments, out.MissingAttachments)
			}
			a := out.Attachments[0]
			if a.Name != "hist.png" || a.Path != "/files/output/hist.png" || a.MIME != "image/png" || !bytes.HasPrefix(a.Data, []byte("\x89PNG\r\n\x1a\n")) {
				t.Errorf("attachment %s %s %s, %d bytes", a.Name, a.Path, a.MIME, len(a.Data))
			}
		})
	}
}

func TestErrorThenFix(t *testing.T) {
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			sb := sandbox(t)
			fm := newFakeModel(t, p,
				turn{code: "values = [3, 4, 5]\nprint(sum(values) / len(vals))"},
				turn{expect: "NameError: name 'vals' is not defined", code: "print(sum(values) / len(values))"},
				turn{expect: "4.0", text: "The mean is 4.0."})
			out, err := interpreter.New(sb, fm.client(t)).Execute(ctxT(t, 30*time.Second), "What is the mean of 3, 4 and 5?", nil)
			fm.check()
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if out.Text != "The mean is 4.0." || len(out.Executions) != 2 || out.Steps != 3 {
				t.Fatalf("text %q, %d executions, %d steps", out.Text, len(out.Executions), out.Steps)
			}
			first, second := out.Executions[0].Result, out.Executions[1].Result
			if first.Status != interpreter.StatusError || first.Error != "NameError: name 'vals' is not defined" || first.ExitCode != 1 {
				t.Errorf("first attempt: %+v", first)
			}
			if second.Status != interpreter.StatusSuccess || strings.TrimSpace(second.Stdout) != "4.0" || second.ExitCode != 0 {
				t.Errorf("the fix: %+v", second)
			}
			if len(out.Attachments) != 0 {
				t.Errorf("attachments %v", out.Attachments)
			}
		})
	}
}

func TestStepLimit(t *testing.T) {
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			sb := sandbox(t)
			fm := newFakeModel(t, p, turn{code: "print('again')"})
			fm.repeat = true
			it := interpreter.New(sb, fm.client(t))
			it.MaxSteps = 3
			out, err := it.Execute(ctxT(t, 30*time.Second), "Loop forever", nil)
			fm.check()
			if !errors.Is(err, interpreter.ErrStepLimit) {
				t.Fatalf("err = %v, want ErrStepLimit", err)
			}
			if !strings.Contains(err.Error(), "after 3 model calls") {
				t.Errorf("unclear error: %v", err)
			}
			if out == nil || out.Steps != 3 || len(out.Executions) != 2 || fm.calls() != 3 {
				t.Fatalf("output %+v, %d model calls", out, fm.calls())
			}
		})
	}
}

// A cancelled context stops the code running in the sandbox, not only the loop.
func TestCancelStopsSandboxWork(t *testing.T) {
	sb := sandbox(t)
	fm := newFakeModel(t, "openai", turn{code: "import time\ntime.sleep(60)\nprint('finished')"})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1500*time.Millisecond, cancel)
	start := time.Now()
	_, err := interpreter.New(sb, fm.client(t)).Execute(ctx, "Sleep", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Execute returned %s after the cancel", d)
	}
	// The kernel is free again: the sleep was interrupted.
	res, err := sb.ExecuteCode(ctxT(t, 15*time.Second), "print('free')", 5*time.Second, nil)
	if err != nil || res.Status != interpreter.StatusSuccess || strings.TrimSpace(res.Stdout) != "free" {
		t.Fatalf("after cancel: %+v, %v", res, err)
	}
}

// The gllm_tools-style API directly.
func TestExecuteCodeAPI(t *testing.T) {
	sb := sandbox(t)
	ctx := ctxT(t, 30*time.Second)
	res, err := sb.ExecuteCode(ctx, "print(open('/files/in.txt').read().upper())\nimport sys\nprint('warn', file=sys.stderr)\n6 * 7", 10*time.Second,
		[]interpreter.Attachment{{Name: "in.txt", Data: []byte("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != interpreter.StatusSuccess || res.Stdout != "HELLO\n" || res.Stderr != "warn\n" || res.Value != "42" || res.ExitCode != 0 || res.Error != "" {
		t.Errorf("%+v", res)
	}
	if res.Text != "HELLO\n42\nwarn\n" || res.Duration <= 0 {
		t.Errorf("text %q, duration %s", res.Text, res.Duration)
	}
	// JSON carries gllm_tools' duration_ms, whole milliseconds.
	var js map[string]any
	if b, err := json.Marshal(res); err != nil || json.Unmarshal(b, &js) != nil || js["duration_ms"] != float64(res.Duration.Milliseconds()) || js["duration"] != nil {
		t.Errorf("JSON: %v %v", js, err)
	}
	// An attachment name with a directory is refused, not flattened.
	if _, err := sb.ExecuteCode(ctx, "1", 10*time.Second, []interpreter.Attachment{{Name: "dir/x.txt", Data: []byte("a")}}); !errors.Is(err, sandboxes.ErrInvalidInput) {
		t.Errorf("attachment dir/x.txt: %v, want ErrInvalidInput", err)
	}
	res, err = sb.ExecuteCode(ctx, "import time\ntime.sleep(10)", 1*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != interpreter.StatusTimeout || res.ExitCode != 1 || res.Error == "" {
		t.Errorf("timeout: %+v", res)
	}
	res, err = sb.ExecuteCode(ctx, "import sys\nsys.exit(3)", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != interpreter.StatusError || res.ExitCode != 3 {
		t.Errorf("sys.exit: %+v", res)
	}
	b, err := sb.DownloadFile(ctx, "/files/in.txt")
	if err != nil || string(b) != "hello" {
		t.Errorf("download: %q, %v", b, err)
	}
	if _, err := sb.DownloadFile(ctx, "/files/nope.txt"); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("download of a missing file: %v", err)
	}
}
