package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/interpreter/lm"
)

// ErrStepLimit is returned (wrapped) by Execute when the model still wants to
// run code after MaxSteps model calls.
var ErrStepLimit = errors.New("interpreter: step limit reached")

// ToolName is the name of the one tool the model is given.
const ToolName = "execute_code"

// CodeModeToolName is the one tool the model is given in code mode
// (Interpreter.Tools set): its code can call the granted tools.
const CodeModeToolName = "run_code"

// Defaults of an Interpreter.
const (
	DefaultMaxSteps           = 10
	DefaultTimeout            = 60 * time.Second
	DefaultMaxToolOutput      = 16 << 10
	DefaultMaxImagesPerRun    = 4
	DefaultMaxImageBytes      = 4 << 20
	DefaultMaxAttachments     = 20
	DefaultMaxAttachmentBytes = 32 << 20
)

// DefaultSystemPrompt tells the model how to use the sandbox.
const DefaultSystemPrompt = `You are a code interpreter. You solve the user's request by writing Python code and running it with the execute_code tool in a sandboxed Jupyter-like kernel.

- State persists between calls: variables, imports and files stay.
- Files the user uploaded are in /files/. Write files you produce to /files/output/ (create it).
- The value of the last expression is shown, as in Jupyter. A matplotlib figure shown with plt.show() comes back to you as an image.
- The sandbox has no internet access; numpy, pandas and matplotlib are available.
- If the code raises, read the traceback, fix the code and run it again.
- When you are done, answer in plain text without calling the tool. Link every file you want to give the user as a Markdown link to its sandbox path, e.g. [hist.png](sandbox:/files/output/hist.png); those files are delivered to the user.`

// CodeExecResult is one execution the model asked for.
type CodeExecResult struct {
	// ID is the tool call's id.
	ID   string `json:"id"`
	Code string `json:"code"`
	// Output is what the model was shown (bounded).
	Output string `json:"output"`
	// Result is the full result; nil when the call couldn't run (bad
	// arguments, unknown tool).
	Result *ExecutionResult `json:"result,omitempty"`
}

// Output is the outcome of Execute (gllm_inference's LMOutput).
type Output struct {
	// Text is the model's final answer.
	Text string `json:"text"`
	// Executions are the code executions, in order.
	Executions []CodeExecResult `json:"executions"`
	// Attachments are the files the answer links as sandbox:/…, downloaded.
	Attachments []Attachment `json:"attachments,omitempty"`
	// MissingAttachments are linked paths that couldn't be downloaded, with why.
	MissingAttachments []string `json:"missing_attachments,omitempty"`
	// Steps is the number of model calls made.
	Steps int `json:"steps"`
	// Messages is the conversation, for inspection or continuation.
	Messages []lm.Message `json:"-"`
}

// Interpreter runs the tool-calling loop. The caller owns the sandbox and
// terminates it.
type Interpreter struct {
	Sandbox CodeSandbox
	Model   lm.Client

	// MaxSteps bounds the model calls of one Execute (DefaultMaxSteps).
	MaxSteps int
	// Timeout of each code execution (DefaultTimeout).
	Timeout time.Duration
	// SystemPrompt (DefaultSystemPrompt).
	SystemPrompt string
	// MaxToolOutput bounds the text of one execution shown to the model
	// (DefaultMaxToolOutput bytes).
	MaxToolOutput int
	// MaxTokens per model answer (0: the client's default).
	MaxTokens int
	// OnExecution, when set, is called after every execution.
	OnExecution func(CodeExecResult)

	// Tools turn on code mode: they are granted to the sandbox (which must
	// be able to take them: a *Sandbox), the model gets one run_code tool
	// instead of execute_code, and the system prompt lists the tools'
	// Python signatures, so the model writes code that calls them (loops,
	// filters and joins happen in the sandbox, not in its context). They
	// are granted at the first Execute.
	Tools []sandboxes.Tool

	granted bool
}

// ToolGranter is a CodeSandbox that can be granted tools (code mode).
type ToolGranter interface {
	RegisterTools(ctx context.Context, tools ...sandboxes.Tool) error
}

// NewCodeMode returns an Interpreter in code mode: the model's code can call
// tools (see Interpreter.Tools).
func NewCodeMode(sb CodeSandbox, model lm.Client, tools ...sandboxes.Tool) *Interpreter {
	return &Interpreter{Sandbox: sb, Model: model, Tools: tools}
}

func (it *Interpreter) toolName() string {
	if len(it.Tools) > 0 {
		return CodeModeToolName
	}
	return ToolName
}

// New returns an Interpreter with the defaults.
func New(sb CodeSandbox, model lm.Client) *Interpreter {
	return &Interpreter{Sandbox: sb, Model: model}
}

type codeArgs struct {
	Code string `json:"code"`
}

func (it *Interpreter) tool() lm.Tool {
	desc := "Run Python code in the sandbox's stateful kernel and return its stdout, stderr, the value of the last expression, errors with tracebacks, and displayed figures."
	if len(it.Tools) > 0 {
		desc += " The code can call the tools listed in the system prompt through the tools module (import tools)."
	}
	return lm.Tool{Name: it.toolName(),
		Description: desc,
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"code": map[string]any{"type": "string", "description": "The Python code to run."},
			},
			"required": []string{"code"},
		}}
}

// Execute answers message, running code in the sandbox as the model asks.
// files are uploaded to /files/<name> before the first execution. On error
// the Output so far is returned with it.
func (it *Interpreter) Execute(ctx context.Context, message string, files []Attachment) (*Output, error) {
	if it.Sandbox == nil || it.Model == nil {
		return nil, errors.New("interpreter: a sandbox and a model are required")
	}
	maxSteps := it.MaxSteps
	if maxSteps <= 0 {
		maxSteps = DefaultMaxSteps
	}
	timeout := it.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	system := it.SystemPrompt
	if system == "" {
		system = DefaultSystemPrompt
	}
	if len(it.Tools) > 0 {
		if !it.granted {
			g, ok := it.Sandbox.(ToolGranter)
			if !ok {
				return nil, fmt.Errorf("%w: code mode needs a sandbox that can be granted tools (an *interpreter.Sandbox), not %T", sandboxes.ErrInvalidInput, it.Sandbox)
			}
			if err := g.RegisterTools(ctx, it.Tools...); err != nil {
				return nil, fmt.Errorf("interpreter: granting the tools: %w", err)
			}
			it.granted = true
		}
		system = strings.ReplaceAll(system, "execute_code", CodeModeToolName) + "\n\n" + ToolsPrompt(it.Tools)
	}
	maxOut := it.MaxToolOutput
	if maxOut <= 0 {
		maxOut = DefaultMaxToolOutput
	}
	user := message
	if len(files) > 0 {
		var names []string
		for _, f := range files {
			if f.Name == "" || strings.ContainsAny(f.Name, "/\x00") || f.Name == "." || f.Name == ".." {
				return nil, fmt.Errorf("%w: attachment name %q must be a plain file name (it lands in /files/<name>)", sandboxes.ErrInvalidInput, f.Name)
			}
			names = append(names, "/files/"+f.Name)
		}
		user += "\n\nUploaded files: " + strings.Join(names, ", ")
	}
	out := &Output{}
	msgs := []lm.Message{{Role: lm.RoleUser, Text: user}}
	pending := files
	for step := 1; ; step++ {
		if err := ctx.Err(); err != nil {
			out.Messages = msgs
			return out, fmt.Errorf("interpreter: %w", err)
		}
		resp, err := it.Model.Complete(ctx, lm.Request{System: system, Messages: msgs, Tools: []lm.Tool{it.tool()}, MaxTokens: it.MaxTokens})
		out.Steps = step
		if err != nil {
			out.Messages = msgs
			return out, fmt.Errorf("interpreter: model call %d: %w", step, err)
		}
		for i := range resp.ToolCalls {
			if resp.ToolCalls[i].ID == "" {
				resp.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", step, i+1)
			}
		}
		msgs = append(msgs, lm.Message{Role: lm.RoleAssistant, Text: resp.Text, ToolCalls: resp.ToolCalls})
		if len(resp.ToolCalls) == 0 {
			out.Text = resp.Text
			out.Messages = msgs
			it.collectAttachments(ctx, out)
			return out, nil
		}
		if step >= maxSteps {
			out.Text = resp.Text
			out.Messages = msgs
			return out, fmt.Errorf("%w: the model still asked to run code after %d model calls (%d executions); raise MaxSteps or simplify the request", ErrStepLimit, step, len(out.Executions))
		}
		for _, tc := range resp.ToolCalls {
			m, rec, err := it.runCall(ctx, tc, timeout, maxOut, pending)
			if err != nil {
				out.Messages = msgs
				return out, err
			}
			if rec.Result != nil {
				pending = nil // uploaded
			}
			msgs = append(msgs, m)
			out.Executions = append(out.Executions, rec)
			if it.OnExecution != nil {
				it.OnExecution(rec)
			}
		}
	}
}

func (it *Interpreter) runCall(ctx context.Context, tc lm.ToolCall, timeout time.Duration, maxOut int, files []Attachment) (lm.Message, CodeExecResult, error) {
	reply := lm.Message{Role: lm.RoleTool, ToolCallID: tc.ID}
	rec := CodeExecResult{ID: tc.ID}
	if tc.Name != it.toolName() {
		reply.IsError, reply.Text = true, fmt.Sprintf("Unknown tool %q; the only tool is %s.", tc.Name, it.toolName())
		rec.Output = reply.Text
		return reply, rec, nil
	}
	var args codeArgs
	if err := json.Unmarshal(tc.Arguments, &args); err != nil || strings.TrimSpace(args.Code) == "" {
		reply.IsError, reply.Text = true, `Invalid arguments: give a JSON object {"code": "<python code>"}.`
		rec.Output = reply.Text
		return reply, rec, nil
	}
	rec.Code = args.Code
	res, err := it.Sandbox.ExecuteCode(ctx, args.Code, timeout, files)
	if err != nil {
		return reply, rec, fmt.Errorf("interpreter: running the model's code: %w", err)
	}
	rec.Result = res
	var b strings.Builder
	fmt.Fprintf(&b, "status: %s\n", res.Status)
	if strings.TrimSpace(res.Text) == "" {
		b.WriteString("(no output)\n")
	} else {
		text, _ := clip(res.Text, maxOut)
		b.WriteString(text)
	}
	if res.Truncated {
		b.WriteString("\n[the output was truncated]")
	}
	images := 0
	for _, f := range res.Figures {
		switch {
		case !it.Model.SupportsImages():
			fmt.Fprintf(&b, "\n[a figure was displayed: %s, %d bytes; you can't see images]", f.MIME, len(f.Data))
		case images >= DefaultMaxImagesPerRun || len(f.Data) > DefaultMaxImageBytes:
			fmt.Fprintf(&b, "\n[a figure was displayed but not shown to you: %s, %d bytes]", f.MIME, len(f.Data))
		default:
			images++
			reply.Images = append(reply.Images, lm.Image{MIME: f.MIME, Data: f.Data})
			fmt.Fprintf(&b, "\n[figure %d is attached as an image]", images)
		}
	}
	reply.Text = b.String()
	reply.IsError = res.Status != StatusSuccess
	rec.Output = reply.Text
	return reply, rec, nil
}

// sandboxLink finds sandbox:/path links (Markdown or bare) in an answer.
var sandboxLink = regexp.MustCompile(`sandbox:(/[^\s)\]"'<>` + "`" + `]+)`)

func (it *Interpreter) collectAttachments(ctx context.Context, out *Output) {
	seen := map[string]bool{}
	total := 0
	for _, m := range sandboxLink.FindAllStringSubmatch(out.Text, -1) {
		p := strings.TrimRight(m[1], ".,;:!?")
		if u, err := url.PathUnescape(p); err == nil {
			p = u
		}
		p = path.Clean(p)
		if seen[p] {
			continue
		}
		seen[p] = true
		if len(out.Attachments) >= DefaultMaxAttachments {
			out.MissingAttachments = append(out.MissingAttachments, p+": too many attachments")
			continue
		}
		b, err := it.Sandbox.DownloadFile(ctx, p)
		if err != nil {
			out.MissingAttachments = append(out.MissingAttachments, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		if total+len(b) > DefaultMaxAttachmentBytes {
			out.MissingAttachments = append(out.MissingAttachments, fmt.Sprintf("%s: attachments exceed %d bytes", p, DefaultMaxAttachmentBytes))
			continue
		}
		total += len(b)
		mt := mime.TypeByExtension(path.Ext(p))
		if mt == "" {
			mt = "application/octet-stream"
		}
		out.Attachments = append(out.Attachments, Attachment{Name: path.Base(p), Path: p, MIME: mt, Data: b})
	}
}
