package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// languages are the kernels code runs in: internal/kernel's (local,
// docker, kubernetes) and those of E2B's code interpreter (e2b); the
// sandbox still refuses one whose interpreter it lacks, with the reason.
var languages = []string{"python", "javascript", "typescript", "r", "java", "bash"}

// languageAliases are the other spellings E2B's server (and our agent)
// accept for them.
var languageAliases = map[string]string{"py": "python", "python3": "python", "js": "javascript", "ts": "typescript", "sh": "bash", "shell": "bash"}

// languageFlag adds --language to exec, create and repl.
func (c *common) languageFlag(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&c.language, "language", "l", "", "language of the code: "+strings.Join(languages, ", ")+" (default python; the sandbox must have its interpreter)")
}

// checkLanguage returns the language --language names, in the kernel's
// spelling ("" for the default, python), or refuses an unknown one with the
// list before any sandbox is made.
func checkLanguage(l string) (string, error) {
	n := strings.ToLower(strings.TrimSpace(l))
	if a, ok := languageAliases[n]; ok {
		n = a
	}
	if n == "" || slices.Contains(languages, n) {
		return n, nil
	}
	return "", fmt.Errorf("--language %q: no kernel runs it; use one of %s", l, strings.Join(languages, ", "))
}
