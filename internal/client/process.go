package client

import (
	"context"
	"fmt"
	"strings"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// maxRunOutput bounds the combined output RunProcess keeps (for error messages).
const maxRunOutput = 1 << 20

// RunProcess runs cmd with args (no shell) through envd's process service,
// with env added and in cwd ("" = the default), and returns its exit code and
// combined output (bounded). Launchers use it for set-up steps such as pip.
func (c *Client) RunProcess(ctx context.Context, cmd string, args []string, env map[string]string, cwd string) (int, string, error) {
	p, err := c.StartProcess(ctx, StartOptions{Cmd: cmd, Args: args, Env: env, Cwd: cwd})
	if err != nil {
		return 0, "", err
	}
	defer p.Close()
	var out strings.Builder
	code, ended := 0, false
	for {
		ev, ok := p.Next()
		if !ok {
			break
		}
		if out.Len() < maxRunOutput {
			out.Write(ev.Stdout)
			out.Write(ev.Stderr)
		}
		if ev.End {
			code, ended = ev.ExitCode, true
		}
	}
	if err := p.Err(); err != nil {
		return 0, out.String(), err
	}
	if !ended {
		return 0, out.String(), fmt.Errorf("%w: the process stream ended without a result", sberr.ErrUnavailable)
	}
	return code, out.String(), nil
}
