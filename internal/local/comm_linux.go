package local

import (
	"os"
	"unsafe"

	"github.com/code-sandboxes/code-sandboxes/internal/isolate"

	"golang.org/x/sys/unix"
)

// roleComms are the process names (comm, at most 15 bytes) of a sandbox's
// own processes, as ps, top and perf show them. They run from an
// execute-only copy of the binary through a file descriptor, which would
// otherwise name every one of them after the descriptor's number ("6").
var roleComms = map[string]string{
	roleShim:        "csb-supervisor",
	roleAgent:       "csb-agent",
	roleGVisorAgent: "csb-agent",
}

// An init, not Main: package inits run on the process's main thread, the
// one whose name ps shows, and before most of the runtime's threads exist
// (a thread starts with the name of the thread that made it).
func init() {
	name, ok := roleComms[os.Getenv(roleEnv)]
	if ok && isolate.IsRootBroker() {
		// Started as the agent is, it ends up the root user's broker.
		name = "csb-root"
	}
	if ok {
		if p, err := unix.BytePtrFromString(name); err == nil {
			_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
		}
	}
}
