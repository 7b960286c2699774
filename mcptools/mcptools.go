// Package mcptools grants a sandbox tools of an MCP server: the caller
// connects to the server with the official Go MCP SDK (stdio, streamable
// HTTP, in memory) and picks tools by name; each becomes a sandboxes.Tool
// that sandbox code calls as tools.<name>(**kwargs) (see Sandbox.RegisterTools).
//
// It is a package of its own so that programs that don't use MCP don't link
// the SDK.
package mcptools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// ErrUnknownTool is a name the MCP server doesn't offer.
var ErrUnknownTool = errors.New("the MCP server has no such tool")

// PythonName is the name a tool of an MCP server gets in the sandbox: MCP
// names may hold "-", "." and "/", which a Python function name can't, so
// each of those becomes "_" (a name still invalid after that is refused by
// RegisterTools with the reason).
func PythonName(mcpName string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '-', '.', '/', ' ':
			return '_'
		}
		return r
	}, mcpName)
}

// Tools returns the named tools of the session's server as sandbox tools
// (all of them when names is empty). A name the server lacks is an error
// that lists what it has. Each call runs the tool on the server through the
// session: a result with isError becomes a tools.ToolError in the sandbox
// carrying the server's text; otherwise the sandbox gets the structured
// content when the server sends one, else the text (one text block as a
// string, several as a list), with images and other content as dicts.
func Tools(ctx context.Context, session *mcp.ClientSession, names ...string) ([]sandboxes.Tool, error) {
	offered := map[string]*mcp.Tool{}
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing the MCP server's tools: %w", err)
		}
		offered[t.Name] = t
	}
	if len(names) == 0 {
		for n := range offered {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	out := make([]sandboxes.Tool, 0, len(names))
	seen := map[string]string{}
	for _, n := range names {
		t, ok := offered[n]
		if !ok {
			have := make([]string, 0, len(offered))
			for h := range offered {
				have = append(have, h)
			}
			sort.Strings(have)
			return nil, fmt.Errorf("%w: %q (it has: %s)", ErrUnknownTool, n, strings.Join(have, ", "))
		}
		py := PythonName(n)
		if prev, dup := seen[py]; dup {
			return nil, fmt.Errorf("%w: MCP tools %q and %q would both be tools.%s in the sandbox; grant one of them", sandboxes.ErrInvalidInput, prev, n, py)
		}
		seen[py] = n
		var schema json.RawMessage
		if t.InputSchema != nil {
			b, err := json.Marshal(t.InputSchema)
			if err != nil {
				return nil, fmt.Errorf("tool %q: its input schema: %w", n, err)
			}
			schema = b
		}
		desc := t.Description
		if desc == "" && t.Title != "" {
			desc = t.Title
		}
		out = append(out, sandboxes.Tool{Name: py, Description: desc, InputSchema: schema, Func: caller(session, n)})
	}
	return out, nil
}

func caller(session *mcp.ClientSession, name string) sandboxes.ToolFunc {
	return func(ctx context.Context, args json.RawMessage) (any, error) {
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return nil, fmt.Errorf("MCP tool %s: %w", name, err)
		}
		if res.IsError {
			msg := strings.TrimSpace(texts(res.Content))
			if msg == "" {
				msg = "the tool reported an error"
			}
			return nil, errors.New(msg)
		}
		if res.StructuredContent != nil {
			return res.StructuredContent, nil
		}
		return contentValue(res.Content), nil
	}
}

func texts(cs []mcp.Content) string {
	var b strings.Builder
	for _, c := range cs {
		if t, ok := c.(*mcp.TextContent); ok {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// contentValue is what sandbox code gets for unstructured content.
func contentValue(cs []mcp.Content) any {
	if len(cs) == 1 {
		if t, ok := cs[0].(*mcp.TextContent); ok {
			return t.Text
		}
	}
	out := make([]any, 0, len(cs))
	for _, c := range cs {
		switch c := c.(type) {
		case *mcp.TextContent:
			out = append(out, c.Text)
		case *mcp.ImageContent:
			out = append(out, map[string]any{"type": "image", "mime_type": c.MIMEType, "data": base64.StdEncoding.EncodeToString(c.Data)})
		case *mcp.AudioContent:
			out = append(out, map[string]any{"type": "audio", "mime_type": c.MIMEType, "data": base64.StdEncoding.EncodeToString(c.Data)})
		default:
			b, _ := json.Marshal(c)
			var v any
			_ = json.Unmarshal(b, &v)
			out = append(out, v)
		}
	}
	return out
}

// Dial connects to an MCP server given as spec: an http:// or https:// URL
// is a streamable HTTP endpoint; anything else is a command line (split on
// spaces, no shell) started as a child that serves MCP on stdio. The child
// ends when the session is closed.
func Dial(ctx context.Context, spec string) (*mcp.ClientSession, error) {
	spec = strings.TrimSpace(spec)
	var t mcp.Transport
	switch {
	case strings.HasPrefix(spec, "http://") || strings.HasPrefix(spec, "https://"):
		t = &mcp.StreamableClientTransport{Endpoint: spec}
	default:
		words := strings.Fields(spec)
		if len(words) == 0 {
			return nil, fmt.Errorf("%w: an empty MCP server: give a URL or a command line", sandboxes.ErrInvalidInput)
		}
		cmd := exec.Command(words[0], words[1:]...)
		cmd.Stderr = os.Stderr
		t = &mcp.CommandTransport{Command: cmd}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "code-sandboxes", Version: "1"}, nil).Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to the MCP server %q: %w", spec, err)
	}
	return cs, nil
}

// FromServers dials every server (see Dial) and returns their tools, all of
// them or only those named (a name no server has is an error), and a
// function that closes the sessions. Two servers offering one name is an
// error: grant by name to pick.
func FromServers(ctx context.Context, specs, names []string) ([]sandboxes.Tool, func(), error) {
	var sessions []*mcp.ClientSession
	closeAll := func() {
		for _, s := range sessions {
			_ = s.Close()
		}
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	found := map[string]bool{}
	var out []sandboxes.Tool
	from := map[string]string{}
	for _, spec := range specs {
		cs, err := Dial(ctx, spec)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		sessions = append(sessions, cs)
		var pick []string
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("listing the tools of %q: %w", spec, err)
			}
			if len(want) == 0 || want[t.Name] || want[PythonName(t.Name)] {
				pick = append(pick, t.Name)
				found[t.Name], found[PythonName(t.Name)] = true, true
			}
		}
		if len(pick) == 0 {
			continue
		}
		tools, err := Tools(ctx, cs, pick...)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		for _, t := range tools {
			if prev, dup := from[t.Name]; dup {
				closeAll()
				return nil, nil, fmt.Errorf("%w: tool %s is offered by %q and %q; name the tools to grant", sandboxes.ErrInvalidInput, t.Name, prev, spec)
			}
			from[t.Name] = spec
		}
		out = append(out, tools...)
	}
	for _, n := range names {
		if !found[n] {
			closeAll()
			return nil, nil, fmt.Errorf("%w: %q is offered by none of the MCP servers", ErrUnknownTool, n)
		}
	}
	return out, closeAll, nil
}
