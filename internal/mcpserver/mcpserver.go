// Package mcpserver is `code-sandboxes mcp`: a Model Context Protocol server
// (official Go SDK) whose tools run code and commands, read and write files
// and manage kernel contexts in a sandbox. Every client session gets its own
// sandbox, created on its first tool call and killed when the session ends.
package mcpserver

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/secs"
	"github.com/code-sandboxes/code-sandboxes/interpreter"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of what a tool returns.
const (
	MaxTextOutput = 64 << 10 // per stream of a run_code / run_command
	MaxReadFile   = 8 << 20
	MaxImages     = 8
)

// Options configure the server.
type Options struct {
	// Config creates each session's sandbox.
	Config sandboxes.Config
	// ExecTimeout bounds run_code and run_command when the call gives none
	// (default 60s); calls may ask for at most MaxTimeout (default 10m).
	ExecTimeout time.Duration
	MaxTimeout  time.Duration
	// Version is reported to clients.
	Version string
	Logger  *slog.Logger
	// Tools are granted to every session's sandbox (code mode): code run
	// with run_code calls them through the tools module, and run_code's
	// description lists their Python signatures.
	Tools []sandboxes.Tool
}

// Server is the MCP server and its sandboxes.
type Server struct {
	opts Options
	mcp  *mcp.Server

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*session
	closed   bool
	// ending counts sessions whose sandbox end is killing (end): Close
	// waits for them, so that a program exiting right after Close (stdio:
	// the client hung up) leaves no sandbox a session ended running.
	ending sync.WaitGroup
}

type session struct {
	once    sync.Once
	sb      *sandboxes.Sandbox
	err     error
	mu      sync.Mutex
	created map[string]bool // contexts made with create_context
}

// New returns a server; Close kills the sandboxes still alive.
func New(opts Options) *Server {
	if opts.ExecTimeout <= 0 {
		opts.ExecTimeout = 60 * time.Second
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = 10 * time.Minute
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(opts.Tools) > 0 {
		opts.Config.Tools = opts.Tools
	}
	s := &Server{opts: opts, sessions: map[*mcp.ServerSession]*session{}}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "code-sandboxes", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Run Python code, shell commands and file operations in an isolated sandbox that belongs to this session. " +
			"State (variables, files) persists between calls; the sandbox is destroyed when the session ends.",
		Logger: opts.Logger,
	})
	s.addTools()
	return s
}

// MCP returns the underlying SDK server.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves one session over t (e.g. &mcp.StdioTransport{}) until it ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	ss, err := s.mcp.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("mcp: connect: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = ss.Close()
		<-done
		err = ctx.Err()
	}
	s.end(ss)
	return err
}

// HTTPOptions guard the streamable HTTP transport.
type HTTPOptions struct {
	// Token is the bearer token every request must carry
	// (Authorization: Bearer <token>); required: code execution is not
	// served to whoever reaches the port.
	Token string
	// MaxSessions caps the sessions (each with its sandbox) open at once;
	// 0 = 16. A new session over the cap answers 503.
	MaxSessions int
	// Idle ends a session (and kills its sandbox) after this long without
	// a request; 0 = never.
	Idle time.Duration
}

// HTTPHandler serves the streamable HTTP transport, one session (and
// sandbox) per client, to holders of the token only.
func (s *Server) HTTPHandler(o HTTPOptions) (http.Handler, error) {
	if len(o.Token) < 16 {
		return nil, errors.New("mcp: the HTTP transport needs a bearer token of at least 16 characters")
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = 16
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{SessionTimeout: o.Idle, Logger: s.opts.Logger})
	var initMu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(o.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="code-sandboxes mcp"`)
			http.Error(w, "unauthorized: send Authorization: Bearer <the token mcp --listen printed or was given>", http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Mcp-Session-Id") != "" || r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		// A request without a session id opens a session: count and open
		// under one lock, so that concurrent ones can't overshoot the cap.
		initMu.Lock()
		defer initMu.Unlock()
		n := 0
		for range s.mcp.Sessions() {
			n++
		}
		if n >= o.MaxSessions {
			http.Error(w, fmt.Sprintf("too many sessions: %d are open (the cap); end one (DELETE) or wait for idle ones to end", n), http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

// Close kills every sandbox.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	var list []*session
	for ss, st := range s.sessions {
		list = append(list, st)
		delete(s.sessions, ss)
	}
	s.mu.Unlock()
	var errs []error
	for _, st := range list {
		errs = append(errs, st.close())
	}
	s.ending.Wait()
	return errors.Join(errs...)
}

func (st *session) close() error {
	st.once.Do(func() { st.err = sandboxes.ErrClosed }) // never create after this
	if st.sb != nil {
		return st.sb.Close()
	}
	return nil
}

// end kills the session's sandbox.
func (s *Server) end(ss *mcp.ServerSession) {
	s.mu.Lock()
	st := s.sessions[ss]
	delete(s.sessions, ss)
	if st != nil {
		s.ending.Add(1) // under mu: before a Close can collect and Wait
	}
	s.mu.Unlock()
	if st != nil {
		defer s.ending.Done()
		if err := st.close(); err != nil {
			s.opts.Logger.Warn("killing the session's sandbox", "err", err)
		}
	}
}

// sandbox returns the calling session's sandbox, creating it on first use.
func (s *Server) sandbox(ctx context.Context, req *mcp.CallToolRequest) (*sandboxes.Sandbox, *session, error) {
	ss := req.Session
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("server closed: %w", sandboxes.ErrClosed)
	}
	st := s.sessions[ss]
	fresh := st == nil
	if fresh {
		st = &session{created: map[string]bool{}}
		s.sessions[ss] = st
	}
	s.mu.Unlock()
	if fresh {
		// The sandbox lives as long as the session.
		go func() {
			_ = ss.Wait()
			s.end(ss)
		}()
	}
	st.once.Do(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		st.sb, st.err = sandboxes.Create(cctx, s.opts.Config)
		if st.err != nil {
			st.err = fmt.Errorf("creating the session's sandbox: %w", st.err)
		}
	})
	return st.sb, st, st.err
}

func (s *Server) timeout(sec float64) time.Duration {
	if sec <= 0 {
		return s.opts.ExecTimeout
	}
	d := secs.Duration(sec)
	if d > s.opts.MaxTimeout {
		d = s.opts.MaxTimeout
	}
	return d
}

func textResult(isErr bool, format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: isErr, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, a...)}}}
}

func clip(s string) string {
	if len(s) <= MaxTextOutput {
		return s
	}
	h := strings.ToValidUTF8(s[:MaxTextOutput/2], "")
	t := strings.ToValidUTF8(s[len(s)-MaxTextOutput/2:], "")
	return h + "\n… [output truncated] …\n" + t
}

// Tool inputs.
type (
	RunCodeIn struct {
		Code           string  `json:"code" jsonschema:"the Python code to run"`
		ContextID      string  `json:"context_id,omitempty" jsonschema:"a context from create_context; the default context when empty"`
		TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"execution timeout in seconds"`
	}
	RunCommandIn struct {
		Command        string  `json:"command" jsonschema:"a shell command, run with bash -l -c"`
		Cwd            string  `json:"cwd,omitempty" jsonschema:"working directory"`
		TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"the command is killed after this many seconds"`
	}
	ReadFileIn struct {
		Path string `json:"path" jsonschema:"absolute path, or relative to /home/user"`
	}
	WriteFileIn struct {
		Path     string `json:"path" jsonschema:"absolute path, or relative to /home/user; parent directories are created"`
		Content  string `json:"content" jsonschema:"the file's content"`
		Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	}
	ListFilesIn struct {
		Path  string `json:"path" jsonschema:"a directory"`
		Depth int    `json:"depth,omitempty" jsonschema:"levels to descend (default 1)"`
	}
	CreateContextIn struct {
		Cwd string `json:"cwd,omitempty" jsonschema:"the kernel's working directory"`
	}
	ResetContextIn struct {
		ContextID string `json:"context_id,omitempty" jsonschema:"the context to restart; the default context when empty"`
	}
	NoIn struct{}
)

func (s *Server) addTools() {
	runCode := "Run Python code in the sandbox's stateful Jupyter-like kernel. Returns stdout, the value of the last expression, stderr and the error with its traceback; displayed figures (plt.show()) come back as images."
	if len(s.opts.Tools) > 0 {
		runCode += "\n\n" + interpreter.ToolsPrompt(s.opts.Tools)
	}
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "run_code", Description: runCode}, s.runCode)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "run_command", Description: "Run a shell command in the sandbox and return its exit code, stdout and stderr."}, s.runCommand)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "read_file", Description: "Read a file of the sandbox: text as text, PNG/JPEG/GIF/WebP as an image, other files as a base64 blob."}, s.readFile)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "write_file", Description: "Write a file in the sandbox, replacing it."}, s.writeFile)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_files", Description: "List a directory of the sandbox."}, s.listFiles)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_contexts", Description: "List the kernel contexts of the sandbox (id, language, cwd)."}, s.listContexts)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "create_context", Description: "Create a separate Python kernel context; pass its id to run_code."}, s.createContext)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "reset_context", Description: "Restart a kernel context: its variables and imports are lost (files stay)."}, s.resetContext)
}

func (s *Server) runCode(ctx context.Context, req *mcp.CallToolRequest, in RunCodeIn) (*mcp.CallToolResult, any, error) {
	sb, _, err := s.sandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	d := s.timeout(in.TimeoutSeconds)
	opts := []sandboxes.RunOption{sandboxes.WithTimeout(d)}
	if in.ContextID != "" {
		opts = append(opts, sandboxes.InContext(sandboxes.Context{ID: in.ContextID}))
	}
	ex, err := sb.RunCode(ctx, in.Code, opts...)
	var res *interpreter.ExecutionResult
	switch {
	case err != nil && errors.Is(err, sandboxes.ErrTimeout) && ctx.Err() == nil:
		return textResult(true, "status: timeout\nTimeoutError: execution exceeded %s", d), nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("run_code: %w", err)
	default:
		res = interpreter.FromExecution(in.Code, ex)
	}
	text := res.Text
	if strings.TrimSpace(text) == "" {
		text = "(no output)"
	}
	out := &mcp.CallToolResult{IsError: res.Status != interpreter.StatusSuccess,
		Content: []mcp.Content{&mcp.TextContent{Text: "status: " + string(res.Status) + "\n" + clip(text)}}}
	for i, f := range res.Figures {
		if i >= MaxImages {
			break
		}
		out.Content = append(out.Content, &mcp.ImageContent{Data: f.Data, MIMEType: f.MIME})
	}
	return out, nil, nil
}

func (s *Server) runCommand(ctx context.Context, req *mcp.CallToolRequest, in RunCommandIn) (*mcp.CallToolResult, any, error) {
	sb, _, err := s.sandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	opts := []sandboxes.CommandOption{sandboxes.CommandTimeout(s.timeout(in.TimeoutSeconds))}
	if in.Cwd != "" {
		opts = append(opts, sandboxes.CommandCwd(in.Cwd))
	}
	r, err := sb.Commands().Run(ctx, in.Command, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("run_command: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "exit_code: %d\n", r.ExitCode)
	if r.Error != "" {
		fmt.Fprintf(&b, "error: %s\n", r.Error)
	}
	fmt.Fprintf(&b, "stdout:\n%s", clip(r.Stdout))
	if r.Stderr != "" {
		fmt.Fprintf(&b, "\nstderr:\n%s", clip(r.Stderr))
	}
	return textResult(r.ExitCode != 0, "%s", b.String()), nil, nil
}

func (s *Server) readFile(ctx context.Context, req *mcp.CallToolRequest, in ReadFileIn) (*mcp.CallToolResult, any, error) {
	sb, _, err := s.sandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	rc, err := sb.Files().Read(ctx, in.Path)
	if err != nil {
		return textResult(true, "read_file %s: %v", in.Path, err), nil, nil
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxReadFile+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read_file %s: %w", in.Path, err)
	}
	if len(b) > MaxReadFile {
		return textResult(true, "read_file %s: larger than %d bytes; use run_command to inspect it", in.Path, MaxReadFile), nil, nil
	}
	mt := http.DetectContentType(b)
	switch {
	case strings.HasPrefix(mt, "image/png"), strings.HasPrefix(mt, "image/jpeg"), strings.HasPrefix(mt, "image/gif"), strings.HasPrefix(mt, "image/webp"):
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: b, MIMEType: mt}}}, nil, nil
	case utf8.Valid(b):
		return textResult(false, "%s", b), nil, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
		URI: "sandbox://" + path.Clean("/"+in.Path), MIMEType: "application/octet-stream", Blob: b}}}}, nil, nil
}

func (s *Server) writeFile(ctx context.Context, req *mcp.CallToolRequest, in WriteFileIn) (*mcp.CallToolResult, any, error) {
	sb, _, err := s.sandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	data := []byte(in.Content)
	switch strings.ToLower(in.Encoding) {
	case "", "utf-8", "utf8", "text":
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return textResult(true, "write_file: content is not base64: %v", err), nil, nil
		}
	default:
		return textResult(true, "write_file: unknown encoding %q (use utf-8 or base64)", in.Encoding), nil, nil
	}
	if err := sb.Files().WriteBytes(ctx, in.Path, data); err != nil {
		return textResult(true, "write_file %s: %v", in.Path, err), nil, nil
	}
	return textResult(false, "wrote %d bytes to %s", len(data), in.Path), nil, nil
}

func (s *Server) listFiles(ctx context.Context, req *mcp.CallToolRequest, in ListFilesIn) (*mcp.CallToolResult, any, error) {
	sb, _, err := s.sandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	list, err := sb.Files().List(ctx, in.Path, in.Depth)
	if err != nil {
		return textResult(true, "list_files %s: %v", in.Path, err), nil, nil
	}
	var b strings.Builder
	for i, e := range list {
		if i == 1000 {
			fmt.Fprintf(&b, "… %d more\n", len(list)-i)
			break
		}
		fmt.Fprintf(&b, "%s\t%d\t%s\n", e.Type, e.Size, e.Path)
	}
	return textResult(false, "%s", b.String()), nil, nil
}

func jsonResult(v any) (*mcp.CallToolResult, any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the result: %w", err)
	}
	return textResult(false, "%s", b), nil, nil
}

func (s *Server) listContexts(ctx context.Context, req *mcp.CallToolRequest, _ NoIn) (*mcp.CallToolResult, any, error) {
	sb, _, err := s.sandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	list, err := sb.Contexts(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list_contexts: %w", err)
	}
	return jsonResult(list)
}

func (s *Server) createContext(ctx context.Context, req *mcp.CallToolRequest, in CreateContextIn) (*mcp.CallToolResult, any, error) {
	sb, st, err := s.sandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	c, err := sb.CreateContext(ctx, sandboxes.ContextOptions{Cwd: in.Cwd})
	if err != nil {
		return textResult(true, "create_context: %v", err), nil, nil
	}
	st.mu.Lock()
	st.created[c.ID] = true
	st.mu.Unlock()
	return jsonResult(c)
}

func (s *Server) resetContext(ctx context.Context, req *mcp.CallToolRequest, in ResetContextIn) (*mcp.CallToolResult, any, error) {
	sb, st, err := s.sandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	ids := []string{in.ContextID}
	if in.ContextID == "" {
		// The default context is the one not made with create_context.
		list, err := sb.Contexts(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("reset_context: %w", err)
		}
		ids = nil
		st.mu.Lock()
		for _, c := range list {
			if !st.created[c.ID] {
				ids = append(ids, c.ID)
			}
		}
		st.mu.Unlock()
		if len(ids) == 0 {
			return textResult(false, "the default context has not started yet; nothing to reset"), nil, nil
		}
	}
	for _, id := range ids {
		if err := sb.RestartContext(ctx, sandboxes.Context{ID: id}); err != nil {
			return textResult(true, "reset_context %s: %v", id, err), nil, nil
		}
	}
	return textResult(false, "restarted %s", strings.Join(ids, ", ")), nil, nil
}
