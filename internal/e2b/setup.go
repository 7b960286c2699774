package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
	"github.com/code-sandboxes/code-sandboxes/internal/tail"
)

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
	code, out, err := i.cl.RunProcess(pctx, "python3", args, map[string]string{"PIP_BREAK_SYSTEM_PACKAGES": "1"}, "")
	if err != nil {
		return fmt.Errorf("installing packages %v: %w", spec.Packages, err)
	}
	if code != 0 {
		return fmt.Errorf("%w: installing packages %v: pip exited with %d: %s", sberr.ErrInvalidConfig, spec.Packages, code, tail.Lines(out, 15))
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
