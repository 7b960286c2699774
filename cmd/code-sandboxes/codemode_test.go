//go:build !localonly

package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/code-sandboxes/code-sandboxes/internal/mcptest"
)

// TestMCPToolServer: `code-sandboxes mcp --tool-server CMD --tool shout`,
// with this test binary as the other MCP server: run_code's code calls the
// granted tool and no other.
func TestMCPToolServer(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "mcp", "--tool-server", self, "--tool", "shout")
	// The CLI passes its environment to the server it starts: that makes
	// this binary serve the test MCP server.
	cmd.Env = append(os.Environ(), "CODE_SANDBOXES_RUNTIME_DIR="+runtime, mcptest.ServeEnv+"=1")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": `import tools
print(tools.shout(text="hi"), tools.names())
try:
    tools.call("fail")
except tools.ToolError as e:
    print("refused:", e)`}})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out.WriteString(tc.Text)
		}
	}
	if res.IsError || !strings.Contains(out.String(), "HI ['shout']") || !strings.Contains(out.String(), `refused: tool "fail" is not granted`) {
		t.Errorf("run_code: %s", out.String())
	}
}

func TestToolServerFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"mcp", "--tool", "x"},                       // --tool without a server
		{"serve", "--tool-server", "noequals"},       // NAME=… missing
		{"mcp", "--tool-server", "/nonexistent/mcp"}, // can't start
	} {
		_, errs, code := cli(t, "", args...)
		if code == 0 || !strings.Contains(errs, "tool") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}
