//go:build !linux

package ctragent

import (
	"errors"
	"fmt"
	"os"
)

// The agent is the init of a Linux container (docker's runc, gVisor's
// runsc): it changes ids, capabilities and namespaces with Linux calls.
// Elsewhere only the host side (contract.go) is used; these refuse.
var errUnsupported = errors.New("ctragent: the container agent runs only in a Linux container; elsewhere use the e2b variant (E2B cloud or a Linux host running serve)")

func Run(name, runDir string) int { return fail(name, "%v", errUnsupported) }

func RunInner(name string) int { return fail(name, "%v", errUnsupported) }

func DropPrivileges() error { return errUnsupported }

func DropPrivilegesTo(uid, gid int) error { return errUnsupported }

func fail(name, format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "code-sandboxes "+name+": "+format+"\n", a...)
	return 1
}
