package kubernetes

import "syscall"

// socketpairCloexec: a unix stream socket pair, close-on-exec.
func socketpairCloexec() ([2]int, error) {
	return syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
