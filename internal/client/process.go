package client

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	processpb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// maxRunOutput bounds the combined output RunProcess keeps (for error messages).
const maxRunOutput = 1 << 20

// RunProcess runs cmd with args (no shell) through envd's process service,
// with env added and in cwd ("" = the default), and returns its exit code and
// combined output (bounded). Launchers use it for set-up steps such as pip.
func (c *Client) RunProcess(ctx context.Context, cmd string, args []string, env map[string]string, cwd string) (int, string, error) {
	pc := &processpb.ProcessConfig{Cmd: cmd, Args: args, Envs: env}
	if cwd != "" {
		pc.Cwd = &cwd
	}
	stream, err := c.Process().Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: pc}))
	if err != nil {
		return 0, "", err
	}
	defer stream.Close()
	var out strings.Builder
	code, ended := 0, false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil && out.Len() < maxRunOutput {
			out.Write(d.GetStdout())
			out.Write(d.GetStderr())
		}
		if e := ev.GetEnd(); e != nil {
			code, ended = int(e.GetExitCode()), true
		}
	}
	if err := stream.Err(); err != nil {
		return 0, out.String(), err
	}
	if !ended {
		return 0, out.String(), fmt.Errorf("%w: the process stream ended without a result", sberr.ErrUnavailable)
	}
	return code, out.String(), nil
}
