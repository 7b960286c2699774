package main

import "golang.org/x/sys/unix"

// flushInput drops what the terminal has queued as input and nobody read.
func flushInput(fd int) { _ = unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH) }
