// Package mcptest is a small real MCP server, built with the official Go SDK,
// for the tests of the code that grants MCP tools to sandboxes: in memory,
// or over stdio as a child process (a test binary that calls MaybeServe
// from TestMain and is started with ServeEnv set).
package mcptest

import (
	"context"
	"errors"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeEnv, set to "1" in a test binary's environment, makes MaybeServe
// serve the test server on stdio and exit.
const ServeEnv = "CODE_SANDBOXES_MCPTEST_SERVE"

type countIn struct {
	Text string `json:"text" jsonschema:"the text to count the words of"`
}

type countOut struct {
	Words int `json:"words"`
}

type shoutIn struct {
	Text string `json:"text"`
}

// NewServer returns the test server. Its tools: "word-count" (structured
// {"words": n}), "shout" (text, upper-cased), "fail" (always an isError
// result with the message "no such record").
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "word-count", Description: "Count the words of a text."},
		func(ctx context.Context, req *mcp.CallToolRequest, in countIn) (*mcp.CallToolResult, countOut, error) {
			return nil, countOut{Words: len(strings.Fields(in.Text))}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "shout", Description: "Upper-case a text."},
		func(ctx context.Context, req *mcp.CallToolRequest, in shoutIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.ToUpper(in.Text)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails."},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("no such record")
		})
	return s
}

// Connect runs the test server in memory and returns a client session to it.
func Connect(ctx context.Context) (*mcp.ClientSession, error) {
	st, ct := mcp.NewInMemoryTransports()
	if _, err := NewServer().Connect(ctx, st, nil); err != nil {
		return nil, err
	}
	return mcp.NewClient(&mcp.Implementation{Name: "mcptest-client", Version: "1"}, nil).Connect(ctx, ct, nil)
}

// MaybeServe serves the test server on stdio and exits when ServeEnv is set.
func MaybeServe() {
	if os.Getenv(ServeEnv) != "1" {
		return
	}
	if err := NewServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}
