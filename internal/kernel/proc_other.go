//go:build !linux

package kernel

import (
	"os"
	"syscall"
)

func setDeathSignal(*syscall.SysProcAttr) {}

func setPipeSize(*os.File) {}
