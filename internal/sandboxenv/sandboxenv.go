// Package sandboxenv is what a sandbox's processes start with: the sandbox
// contract's environment (DESIGN §4) and the options of the default python
// kernel. It is apart from the agent so that a local sandbox's stage 1
// (cmd/code-sandboxes-init, which links no HTTP) starts that kernel exactly
// as the agent would.
package sandboxenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/code-sandboxes/code-sandboxes/internal/kernel"
)

// Env is the contract's environment plus the user's variables, which win.
// Launchers that run the agent as a sandbox's init set it after clearing
// their own environment, so nothing of the host's leaks into kernels and
// commands.
func Env(user map[string]string) map[string]string {
	env := map[string]string{
		"PATH":    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME":    "/home/user",
		"USER":    "user",
		"LOGNAME": "user",
		"LANG":    "C.UTF-8",
		"TZ":      "UTC",
		"SHELL":   "/bin/bash",
		"TMPDIR":  "/tmp",
		// Figures render without a display; the kernel captures them as PNG.
		"MPLBACKEND": "Agg",
		// E2B's users run `pip install …` as a command. Debian marks its
		// python externally managed (PEP 668), and pip then refuses even a
		// package that is there. The system site is read-only to the
		// sandbox user, so pip installs into the user's own site (~/.local),
		// which harms no one else: as on E2B, it works. A venv's pip ignores
		// the variable.
		"PIP_BREAK_SYSTEM_PACKAGES": "1",
	}
	for k, v := range user {
		env[k] = v
	}
	return env
}

// ToolsSocketEnv names the environment variable, set for every kernel, that
// holds the path of the agent's tools socket.
const ToolsSocketEnv = "CODE_SANDBOXES_TOOLS_SOCKET"

// NewToolsSocketPath picks the tools socket's path: a fresh directory under
// the sandbox's temp dir (the agent runs as the sandbox user everywhere, so
// it can always create it there).
func NewToolsSocketPath() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	dir := os.Getenv("TMPDIR")
	if dir == "" {
		dir = "/tmp"
	}
	return filepath.Join(dir, ".code-sandboxes-tools-"+hex.EncodeToString(b[:]), "tools.sock")
}

// KernelEnv is every kernel's environment: the process's own (a launcher
// sets the sandbox's), the configured variables, and the tools socket.
func KernelEnv(user map[string]string, toolsSocket string) []string {
	env := os.Environ()
	for k, v := range user {
		env = append(env, k+"="+v)
	}
	// Kernels find the tools socket here (it exists once tools are granted).
	return append(env, ToolsSocketEnv+"="+toolsSocket)
}

// DefaultWorkdir is the sandbox user's home, the default working directory.
const DefaultWorkdir = "/home/user"

// DefaultKernelOptions are the options an agent configured with python,
// workdir and the user's variables (and the tools socket toolsSocket)
// starts its default python context's kernel with, for a launcher that
// starts that kernel before the agent exists (kernel.SpawnEarly, then the
// agent's EarlyKernel and ToolsSocket). The process's environment must be
// the agent's already.
func DefaultKernelOptions(python, workdir string, user map[string]string, toolsSocket string) kernel.Options {
	if workdir == "" {
		workdir = DefaultWorkdir
	}
	return KernelOptions(python, KernelEnv(user, toolsSocket), "python", workdir)
}

// KernelOptions are the options of every kernel an agent starts (the
// agent adds its own protocol pipes, if any): one place, so that the
// kernel stage 1 starts early is the one the agent would have started.
func KernelOptions(python string, env []string, language, cwd string) kernel.Options {
	return kernel.Options{Python: python, Cwd: cwd, Env: env, Language: language}
}
