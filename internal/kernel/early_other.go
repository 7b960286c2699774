//go:build !linux

package kernel

import "errors"

func adoptProc(int) (kernelProc, error) { return nil, errors.New("adopting a kernel needs Linux") }
