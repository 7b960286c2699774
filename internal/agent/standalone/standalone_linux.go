package standalone

import (
	"fmt"
	"os"
	"syscall"

	"github.com/code-sandboxes/code-sandboxes/internal/homeseed"
)

// notDumpable closes /proc/<our pid>/{environ,mem,fd} to processes of our
// uid (see Main).
func notDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", errno)
	}
	return nil
}

// osSignals are the catchable signals only Linux has (ignoreSignals).
var osSignals = []os.Signal{syscall.SIGSTKFLT, syscall.SIGPWR}

// seedHomeDir fills the pod's home from the environment's (Main).
func seedHomeDir() error {
	return homeseed.FromDir(homeseed.Dir, "/home/user", homeseed.Limits{})
}
