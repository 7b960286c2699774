//go:build !linux

package kernel

import (
	"os"
	"syscall"

	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
)

func setDeathSignal(*syscall.SysProcAttr) {}

func setPipeSize(*os.File) {}

// processGone reports whether pid has exited: reaped already, or a zombie.
func processGone(pid int) bool {
	return procstat.Ended(pid, 0)
}
