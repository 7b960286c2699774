//go:build !linux

package kernel

import "errors"

func adoptProc(int) (kernelProc, error) { return nil, errors.New("adopting a kernel needs Linux") }

func reopenWriteFDs(int, int) [2]int { return [2]int{-1, -1} }
