//go:build !linux

package local

import "errors"

// Spare supervisors exist only where local sandboxes do.

func startSpare(string, []string) (*spareShim, error) {
	return nil, errors.New("spare supervisors need Linux")
}

func awaitSpareSpec() ([]byte, bool) {
	return nil, false
}
