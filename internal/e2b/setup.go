package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	processpb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/process"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/process/processconnect"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// maxSetupOutput bounds the set-up output kept for error messages.
const maxSetupOutput = 1 << 20

// setup does what E2B's create body can't say: a WorkingDir other than the
// template's (the default context's cwd; commands get it from the public
// package) and Packages (pip-installed, then made importable by the running
// kernel).
func (i *instance) setup(ctx context.Context, spec driver.Spec) error {
	if wd := spec.WorkingDir; wd != "" && wd != "/home/user" {
		lit, _ := json.Marshal(wd)
		code := fmt.Sprintf("import os as _os\n_os.makedirs(%s, exist_ok=True)\n_os.chdir(%s)\ndel _os", lit, lit)
		if err := i.runSetupCode(ctx, code); err != nil {
			return fmt.Errorf("setting the working directory %s: %w", wd, err)
		}
	}
	if len(spec.Packages) == 0 {
		return nil
	}
	// Not --user: pip falls back to the user site by itself where the system
	// one is read-only, and --user fails inside a virtualenv. Debian's
	// externally-managed marker is overridden by the environment variable,
	// which older pips ignore (unlike the --break-system-packages option).
	args := []string{"-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-warn-script-location", "--progress-bar", "off"}
	if spec.PackageIndex != "" {
		args = append(args, "--index-url", spec.PackageIndex)
	}
	args = append(args, spec.Packages...)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	code, out, err := runProcess(pctx, i.cl, "python3", args, map[string]string{"PIP_BREAK_SYSTEM_PACKAGES": "1"})
	if err != nil {
		return fmt.Errorf("installing packages %v: %w", spec.Packages, err)
	}
	if code != 0 {
		return fmt.Errorf("%w: installing packages %v: pip exited with %d: %s", sberr.ErrInvalidConfig, spec.Packages, code, lastLines(out, 15))
	}
	// E2B's kernel is already running: a user site created just now is not
	// on its sys.path yet.
	return i.runSetupCode(ctx, "import site as _s, sys as _y, importlib as _i\n_p = _s.getusersitepackages()\nif _p not in _y.path: _s.addsitedir(_p)\n_i.invalidate_caches()\ndel _s, _y, _i, _p")
}

func (i *instance) runSetupCode(ctx context.Context, code string) error {
	var failure string
	err := i.cl.Execute(ctx, client.ExecuteRequest{Code: code}, func(l client.Line) {
		if l.Type == "error" {
			failure = l.Name + ": " + l.Value
		}
	})
	if err != nil {
		return err
	}
	if failure != "" {
		return fmt.Errorf("%w: %s", sberr.ErrInvalidConfig, failure)
	}
	return nil
}

// runProcess runs cmd args (no shell) through envd and returns its exit code
// and combined output (bounded).
func runProcess(ctx context.Context, c *client.Client, cmd string, args []string, env map[string]string) (int, string, error) {
	rpc := processconnect.NewProcessClient(c.HTTPClient(), c.EnvdURL())
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: cmd, Args: args, Envs: env}})
	for k, v := range c.EnvdHeaders() {
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
		return 0, out.String(), fmt.Errorf("%w: the process stream ended without a result", sberr.ErrUnavailable)
	}
	return code, out.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
