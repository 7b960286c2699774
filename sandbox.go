package sandboxes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
)

// maxExecutionBytes bounds what one Execution accumulates in memory (logs and
// results); past it output is dropped and Execution.Truncated set. Callbacks
// still see everything.
const maxExecutionBytes = 256 << 20

// Sandbox is a running sandbox. Its methods are safe for concurrent use;
// executions in one context run one at a time.
type Sandbox struct {
	variant driver.Variant
	inst    driver.Instance
	cfg     Config
	spec    driver.Spec

	mu     sync.Mutex
	closed bool

	toolsMu sync.Mutex // serialises grants; guards tools
	tools   toolSet
}

func newSandbox(v driver.Variant, inst driver.Instance, cfg Config, spec driver.Spec) *Sandbox {
	return &Sandbox{variant: v, inst: inst, cfg: cfg, spec: spec}
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.inst.ID() }

// Variant is the name of the sandbox's variant.
func (s *Sandbox) Variant() string { return s.variant.Name() }

// Name is the sandbox's name.
func (s *Sandbox) Name() string { return s.spec.Name }

func (s *Sandbox) conn() (*client.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("sandbox %s: %w", s.inst.ID(), ErrClosed)
	}
	return s.inst.Client(), nil
}

// RunOption configures one RunCode call.
type RunOption func(*runOptions)

type runOptions struct {
	contextID string
	language  string
	env       map[string]string
	timeout   time.Duration
	files     map[string][]byte
	onStdout  func(OutputMessage)
	onStderr  func(OutputMessage)
	onResult  func(Result)
	onError   func(ExecutionError)
}

// InContext runs the code in the given context instead of the default one.
func InContext(c Context) RunOption { return func(o *runOptions) { o.contextID = c.ID } }

// WithLanguage picks the default context of a language: "python" (the
// default), "javascript" or "typescript" (node; TypeScript needs node ≥ 22.6),
// "bash", "r" (Rscript). A language whose interpreter the sandbox lacks is refused with the
// reason (ErrInvalidInput).
func WithLanguage(l string) RunOption { return func(o *runOptions) { o.language = l } }

// WithEnv sets environment variables for this execution only.
func WithEnv(env map[string]string) RunOption { return func(o *runOptions) { o.env = env } }

// WithTimeout bounds this execution: it is interrupted, then its kernel killed.
func WithTimeout(d time.Duration) RunOption { return func(o *runOptions) { o.timeout = d } }

// WithFiles uploads files to /files/<name> before the code runs.
func WithFiles(files map[string][]byte) RunOption { return func(o *runOptions) { o.files = files } }

// OnStdout is called live for every stdout chunk.
func OnStdout(f func(OutputMessage)) RunOption { return func(o *runOptions) { o.onStdout = f } }

// OnStderr is called live for every stderr chunk.
func OnStderr(f func(OutputMessage)) RunOption { return func(o *runOptions) { o.onStderr = f } }

// OnResult is called live for every rich result.
func OnResult(f func(Result)) RunOption { return func(o *runOptions) { o.onResult = f } }

// OnError is called when the code raises.
func OnError(f func(ExecutionError)) RunOption { return func(o *runOptions) { o.onError = f } }

// RunCode runs code in the sandbox. The returned error is for infrastructure
// failures and misuse only; an exception in the code is Execution.Error.
func (s *Sandbox) RunCode(ctx context.Context, code string, opts ...RunOption) (*Execution, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	o := runOptions{timeout: s.cfg.Timeout}
	for _, f := range opts {
		f(&o)
	}
	if o.contextID != "" && o.language != "" {
		return nil, fmt.Errorf("%w: give a context or a language, not both", ErrInvalidInput)
	}
	if o.timeout < 0 {
		return nil, fmt.Errorf("%w: WithTimeout(%s): give a positive duration, or 0 for none", ErrInvalidInput, o.timeout)
	}
	for name, data := range o.files {
		if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
			return nil, fmt.Errorf("%w: attachment name %q must be a plain file name (it lands in /files/<name>)", ErrInvalidInput, name)
		}
		if err := c.WriteFile(ctx, path.Join("/files", name), bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("uploading attachment %s: %w", name, err)
		}
	}
	ex := &Execution{ContextID: o.contextID, StartedAt: time.Now()}
	size := 0
	keep := func(n int) bool {
		if size+n > maxExecutionBytes {
			ex.Truncated = true
			return false
		}
		size += n
		return true
	}
	req := client.ExecuteRequest{Code: code, ContextID: o.contextID, Language: o.language, EnvVars: o.env}
	if o.timeout > 0 {
		req.Timeout = o.timeout.Seconds()
	}
	err = c.Execute(ctx, req, func(l client.Line) {
		switch l.Type {
		case "stdout", "stderr":
			m := OutputMessage{Line: l.Text, Timestamp: l.Timestamp, Error: l.Type == "stderr"}
			if m.Timestamp.IsZero() {
				m.Timestamp = time.Now()
			}
			if keep(len(l.Text)) {
				if m.Error {
					ex.stderr.WriteString(l.Text)
					ex.Logs.Stderr = append(ex.Logs.Stderr, m)
				} else {
					ex.stdout.WriteString(l.Text)
					ex.Logs.Stdout = append(ex.Logs.Stdout, m)
				}
			}
			if m.Error && o.onStderr != nil {
				o.onStderr(m)
			} else if !m.Error && o.onStdout != nil {
				o.onStdout(m)
			}
		case "result":
			r := resultFromFields(l.Data, l.Extra, l.IsMainResult)
			n := 0
			for _, v := range l.Data {
				n += len(v)
			}
			if keep(n) {
				ex.Results = append(ex.Results, r)
			}
			if o.onResult != nil {
				o.onResult(r)
			}
		case "error":
			e := ExecutionError{Name: l.Name, Value: l.Value, Traceback: l.Traceback}
			if l.Name == "KeyboardInterrupt" {
				// Servers without our execution_status line (E2B's) say it so.
				ex.Interrupted = true
			}
			ex.Error = &e
			if o.onError != nil {
				o.onError(e)
			}
		case "number_of_executions":
			ex.ExecutionCount = l.ExecutionCount
		case "exit_code":
			code := l.ExitCode
			ex.ExitCode = &code
		case "execution_status":
			ex.Interrupted = ex.Interrupted || l.Interrupted
			ex.TimedOut = l.TimedOut
		}
	})
	ex.CompletedAt = time.Now()
	if err != nil {
		return ex, fmt.Errorf("run code in sandbox %s: %w", s.ID(), err)
	}
	return ex, nil
}

// Context is an isolated code context: its own kernel and state.
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// ContextOptions configure CreateContext.
type ContextOptions struct {
	Language string // default python
	Cwd      string // default the sandbox's working dir
}

// CreateContext creates a context; its kernel starts on first use.
func (s *Sandbox) CreateContext(ctx context.Context, o ContextOptions) (Context, error) {
	c, err := s.conn()
	if err != nil {
		return Context{}, err
	}
	cc, err := c.CreateContext(ctx, o.Language, o.Cwd)
	if err != nil {
		return Context{}, err
	}
	return Context(cc), nil
}

// Contexts lists the sandbox's contexts.
func (s *Sandbox) Contexts(ctx context.Context) ([]Context, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	list, err := c.ListContexts(ctx)
	out := make([]Context, 0, len(list))
	for _, l := range list {
		out = append(out, Context(l))
	}
	return out, err
}

// DeleteContext removes a context and kills its kernel.
func (s *Sandbox) DeleteContext(ctx context.Context, cc Context) error {
	c, err := s.conn()
	if err != nil {
		return err
	}
	return c.DeleteContext(ctx, cc.ID)
}

// RestartContext restarts a context's kernel; its state is lost.
func (s *Sandbox) RestartContext(ctx context.Context, cc Context) error {
	c, err := s.conn()
	if err != nil {
		return err
	}
	return c.RestartContext(ctx, cc.ID)
}

// VarOption selects the context of a variable operation.
type VarOption = RunOption

// GetVariable decodes a variable of the default context (or InContext) into
// out, which must be a pointer. A value that JSON can't encode arrives as its
// Python repr string, and GetVariable then returns ErrNotJSON along with it.
func (s *Sandbox) GetVariable(ctx context.Context, name string, out any, opts ...VarOption) error {
	if !s.variant.Capabilities().Variables {
		return fmt.Errorf("get variable: %w (%s)", ErrNotSupported, s.variant.Name())
	}
	c, err := s.conn()
	if err != nil {
		return err
	}
	o := runOptions{}
	for _, f := range opts {
		f(&o)
	}
	raw, isRepr, err := c.GetVariable(ctx, o.contextID, name)
	if err != nil {
		return fmt.Errorf("get variable %s: %w", name, err)
	}
	if isRepr {
		var r string
		_ = json.Unmarshal(raw, &r)
		if sp, ok := out.(*string); ok {
			*sp = r
		}
		return fmt.Errorf("variable %s: %w; its repr is %q", name, ErrNotJSON, truncate(r, 200))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("variable %s: decoding into %T: %w", name, out, err)
	}
	return nil
}

// ErrNotJSON: a variable's value can't be encoded as JSON.
var ErrNotJSON = errors.New("value is not JSON-encodable")

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// SetVariable sets a variable in the default context (or InContext) from any
// JSON-encodable Go value.
func (s *Sandbox) SetVariable(ctx context.Context, name string, value any, opts ...VarOption) error {
	if !s.variant.Capabilities().Variables {
		return fmt.Errorf("set variable: %w (%s)", ErrNotSupported, s.variant.Name())
	}
	c, err := s.conn()
	if err != nil {
		return err
	}
	o := runOptions{}
	for _, f := range opts {
		f(&o)
	}
	// []byte becomes Python bytes, not the base64 text JSON would make it.
	if raw, ok := value.([]byte); ok {
		if err := c.SetVariableBytes(ctx, o.contextID, name, raw); err != nil {
			return fmt.Errorf("set variable %s: %w", name, err)
		}
		return nil
	}
	b, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("set variable %s: %w: %w", name, ErrInvalidInput, err)
	}
	if err := c.SetVariable(ctx, o.contextID, name, b); err != nil {
		return fmt.Errorf("set variable %s: %w", name, err)
	}
	return nil
}

// Interrupt interrupts the execution running in the default context (or
// InContext). It reports whether something was running.
func (s *Sandbox) Interrupt(ctx context.Context, opts ...VarOption) (bool, error) {
	if !s.variant.Capabilities().Interrupt {
		return false, fmt.Errorf("interrupt: %w (%s)", ErrNotSupported, s.variant.Name())
	}
	c, err := s.conn()
	if err != nil {
		return false, err
	}
	o := runOptions{}
	for _, f := range opts {
		f(&o)
	}
	return c.Interrupt(ctx, o.contextID)
}

// SetTimeout restarts the sandbox's lifetime countdown: it ends d from now.
func (s *Sandbox) SetTimeout(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: timeout must be positive", ErrInvalidInput)
	}
	if _, err := s.conn(); err != nil {
		return err
	}
	return s.inst.SetTimeout(ctx, d)
}

// UpdateNetwork changes the network policy of a running sandbox, for
// connections opened from then on: n's fields as Config's NetworkPolicy,
// AllowedHosts, DeniedHosts and AllowPrivate, replacing all of them.
// On the local variant a sandbox created with network none stays without
// network, and one created with a network can't be switched to none (its
// network namespace is fixed at creation): both are refused with
// ErrNotSupported, as is every variant that can't change a running
// sandbox's network.
func (s *Sandbox) UpdateNetwork(ctx context.Context, n Network) error {
	n.Policy = strings.ToLower(strings.TrimSpace(n.Policy))
	if err := checkNetworkFields(n, false); err != nil {
		return err
	}
	if _, err := s.conn(); err != nil {
		return err
	}
	u, ok := s.inst.(driver.NetworkUpdater)
	if !ok {
		return fmt.Errorf("update network: %w (%s)", ErrNotSupported, s.variant.Name())
	}
	return u.UpdateNetwork(ctx, driver.NetworkPolicy{Network: n.Policy, AllowedHosts: n.AllowedHosts, DeniedHosts: n.DeniedHosts, AllowPrivate: n.AllowPrivate})
}

// Host returns a "host:port" address on this machine that reaches port
// inside the sandbox, even when the sandbox has no network.
func (s *Sandbox) Host(ctx context.Context, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", fmt.Errorf("%w: port must be 1-65535", ErrInvalidInput)
	}
	if _, err := s.conn(); err != nil {
		return "", err
	}
	return s.inst.Host(ctx, port)
}

// Info describes the sandbox.
func (s *Sandbox) Info(ctx context.Context) (Info, error) {
	if _, err := s.conn(); err != nil {
		return Info{}, err
	}
	return s.inst.Info(ctx)
}

// Close kills the sandbox and everything in it. Closing twice is harmless.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.closeTools()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.inst.Kill(ctx)
	_ = s.inst.Release()
	if errors.Is(err, ErrNotFound) {
		return nil // already gone: the goal is reached
	}
	return err
}

// Detach releases this process's hold on the sandbox without ending it (it
// lives on until its lifetime ends or someone kills it).
func (s *Sandbox) Detach() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeTools()
	return s.inst.Release()
}
