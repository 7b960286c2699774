// Package tail keeps the end of long output for error messages.
package tail

import "strings"

// Lines returns the last n lines of s (trailing blank space trimmed).
func Lines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, " \t\r\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
