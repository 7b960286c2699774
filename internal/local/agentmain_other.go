//go:build !linux

package local

import (
	"fmt"
	"os"
)

// runAgent: the local variant's agent runs inside a sandbox made of Linux
// namespaces (agentmain.go); nothing starts one elsewhere.
func runAgent() int {
	fmt.Fprintln(os.Stderr, "code-sandboxes agent: local sandboxes need Linux (namespaces, cgroups, seccomp); elsewhere use the e2b variant (E2B cloud or a Linux host running serve)")
	return 1
}
