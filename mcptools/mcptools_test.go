package mcptools_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/mcptest"
	"github.com/code-sandboxes/code-sandboxes/local"
	"github.com/code-sandboxes/code-sandboxes/mcptools"
)

func TestMain(m *testing.M) {
	mcptest.MaybeServe()
	os.Exit(m.Run())
}

func session(t *testing.T, stdio bool) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cs *mcp.ClientSession
	var err error
	if stdio {
		// The same test binary, as a child process serving MCP on stdio.
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), mcptest.ServeEnv+"=1")
		cs, err = mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	} else {
		cs, err = mcptest.Connect(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestUnknownName(t *testing.T) {
	_, err := mcptools.Tools(context.Background(), session(t, false), "shout", "nope")
	if !errors.Is(err, mcptools.ErrUnknownTool) || !strings.Contains(err.Error(), "word-count") {
		t.Errorf("err = %v, want ErrUnknownTool listing what the server has", err)
	}
}

func TestMCPToolsInSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	for _, tc := range []struct {
		name  string
		stdio bool
	}{{"InMemory", false}, {"Stdio", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			tools, err := mcptools.Tools(ctx, session(t, tc.stdio), "word-count", "shout", "fail")
			if err != nil {
				t.Fatal(err)
			}
			// Network "none" (the local default): only the granted tools.
			sb, err := sandboxes.Create(ctx, sandboxes.Config{Variant: "local", Options: local.Options{RuntimeDir: t.TempDir()}, Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close()
			ex, err := sb.RunCode(ctx, `
import tools
print(tools.word_count(text="the quick brown fox"))
print(tools.shout(text="hi"))
print(tools.word_count.__doc__.splitlines()[0])
try:
    tools.fail()
except tools.ToolError as e:
    print("ToolError:", e)
`)
			if err != nil {
				t.Fatal(err)
			}
			if ex.Error != nil {
				t.Fatalf("%s: %s\n%s", ex.Error.Name, ex.Error.Value, ex.Error.Traceback)
			}
			want := "{'words': 4}\nHI\nCount the words of a text.\nToolError: no such record\n"
			if got := ex.Stdout(); got != want {
				t.Errorf("stdout = %q, want %q", got, want)
			}
		})
	}
}
