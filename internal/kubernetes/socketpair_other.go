//go:build !linux

package kubernetes

import "syscall"

// socketpairCloexec: a unix stream socket pair, close-on-exec. No
// SOCK_CLOEXEC on macOS: set it after, under ForkLock so no exec in
// between inherits the pair.
func socketpairCloexec() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fds, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return fds, nil
}
