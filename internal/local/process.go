package local

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/code-sandboxes/code-sandboxes/internal/client"
	processpb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/process/processconnect"
)

// maxSetupOutput bounds what a set-up command's output we keep for errors.
const maxSetupOutput = 1 << 20

// runProcess runs cmd args (no shell) in the sandbox and returns its exit code
// and combined output (bounded).
func runProcess(ctx context.Context, c *client.Client, cmd string, args []string, cwd string) (int, string, error) {
	hdr := c.EnvdHeaders()
	rpc := processconnect.NewProcessClient(c.HTTPClient(), c.EnvdURL())
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: cmd, Args: args, Cwd: &cwd}})
	for k, v := range hdr {
		req.Header()[k] = v
	}
	stream, err := rpc.Start(ctx, req)
	if err != nil {
		return 0, "", err
	}
	defer stream.Close()
	var out strings.Builder
	code, ended := 0, false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil && out.Len() < maxSetupOutput {
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
		return 0, out.String(), fmt.Errorf("the process stream ended without a result")
	}
	return code, out.String(), nil
}
