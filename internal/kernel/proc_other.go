//go:build !linux

package kernel

import (
	"errors"
	"os"
	"syscall"
)

func setDeathSignal(*syscall.SysProcAttr) {}

func setPipeSize(*os.File) {}

func adoptProc(int) (kernelProc, error) { return nil, errors.New("adopting a kernel needs Linux") }
