// Package pipinstall installs a sandbox's Packages with pip inside it, the
// same way on every variant that runs our agent.
package pipinstall

import (
	"context"
	"fmt"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
	"github.com/code-sandboxes/code-sandboxes/internal/tail"
)

// Runner runs a process in the sandbox and returns its exit code and
// combined output (client.Client does).
type Runner interface {
	RunProcess(ctx context.Context, cmd string, args []string, env map[string]string, cwd string) (int, string, error)
}

// maxTime bounds one install: a slow index is fine, a stuck one is not.
const maxTime = 10 * time.Minute

// Install pip-installs pkgs into the sandbox user's site (gllm_tools'
// additional_packages) with python ("" = python3) from index ("" = pip's
// own configuration), in workdir ("" = /home/user). The home is the
// sandbox's own, so overriding Debian's externally-managed marker there
// harms nobody. A failing pip is ErrInvalidConfig with its last lines.
func Install(ctx context.Context, r Runner, python, index string, pkgs []string, workdir string) error {
	if python == "" {
		python = "python3"
	}
	if workdir == "" {
		workdir = "/home/user"
	}
	args := []string{"-m", "pip", "install", "--user", "--break-system-packages", "--no-input",
		"--disable-pip-version-check", "--no-warn-script-location", "--progress-bar", "off"}
	if index != "" {
		args = append(args, "--index-url", index)
	}
	args = append(args, pkgs...)
	ctx, cancel := context.WithTimeout(ctx, maxTime)
	defer cancel()
	code, out, err := r.RunProcess(ctx, python, args, nil, workdir)
	if err != nil {
		return fmt.Errorf("installing packages %v: %w", pkgs, err)
	}
	if code != 0 {
		return fmt.Errorf("%w: installing packages %v: pip exited with %d: %s", sberr.ErrInvalidConfig, pkgs, code, tail.Lines(out, 15))
	}
	return nil
}
