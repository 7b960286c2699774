package rawio

import (
	"syscall"
	"unsafe"
)

func nonBlocking(fd uintptr) (bool, error) {
	fl, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	if e != 0 {
		return false, e
	}
	return fl&syscall.O_NONBLOCK != 0, nil
}

func read(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

func write(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// Write writes p to the non-blocking descriptor fd once, raw: the count
// written, or EAGAIN when the descriptor is full.
func Write(fd int, p []byte) (int, error) {
	for {
		n, e := write(uintptr(fd), p)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return n, e
		}
		return n, nil
	}
}
