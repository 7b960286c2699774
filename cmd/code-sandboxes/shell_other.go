//go:build !linux

package main

import "golang.org/x/sys/unix"

// fread is FREAD of <sys/fcntl.h>: TIOCFLUSH's selector of the input queue.
const fread = 0x1

// flushInput drops what the terminal has queued as input and nobody read.
func flushInput(fd int) { _ = unix.IoctlSetPointerInt(fd, unix.TIOCFLUSH, fread) }
