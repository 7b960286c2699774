package envd

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openPTY allocates a pseudo-terminal pair with plain ioctls, so we need no
// cgo and no extra dependency. The slave is obtained with TIOCGPTPEER when
// the kernel has it (it works even when /dev/pts is another devpts instance,
// as in a fresh mount namespace), else by opening /dev/pts/N.
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			master.Close()
		}
	}()
	rc, err := master.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var n, peer int
	var ctlErr, peerErr error
	if err := rc.Control(func(fd uintptr) {
		if ctlErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ctlErr != nil {
			return
		}
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
		if errno == 0 {
			peer = int(r)
			return
		}
		peerErr = errno
		n, ctlErr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
	}); err != nil {
		return nil, nil, err
	}
	if ctlErr != nil {
		return nil, nil, fmt.Errorf("unlock pty: %w", ctlErr)
	}
	if peerErr == nil {
		return master, os.NewFile(uintptr(peer), "pty-slave"), nil
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	return master, slave, nil
}

func resizePTY(master *os.File, cols, rows uint32) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	}); err != nil {
		return err
	}
	return ioErr
}
