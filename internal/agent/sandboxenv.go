package agent

// SandboxEnv is the sandbox contract's environment (DESIGN §4) plus the
// user's variables, which win. Launchers that run the agent as a sandbox's
// init set it after clearing their own environment, so nothing of the
// host's leaks into kernels and commands.
func SandboxEnv(user map[string]string) map[string]string {
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
	}
	for k, v := range user {
		env[k] = v
	}
	return env
}
