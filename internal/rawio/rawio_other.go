//go:build !linux

package rawio

import (
	"errors"
	"syscall"
)

var errUnsupported = errors.New("rawio: no raw path on this platform")

func nonBlocking(uintptr) (bool, error) { return false, errUnsupported }

func read(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	return fixErr(n, err)
}

func write(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), p)
	return fixErr(n, err)
}

func fixErr(n int, err error) (int, syscall.Errno) {
	if err != nil {
		var e syscall.Errno
		if errors.As(err, &e) {
			return 0, e
		}
		return 0, syscall.EIO
	}
	return n, 0
}

// Write is syscall.Write where there is no raw path.
func Write(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
