package docker

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/ctragent"
)

// checkPeerCred: see checkPeer.
func checkPeerCred(uc *net.UnixConn, initPid int) error {
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("reading the agent socket's peer credentials: %w", cerr)
	}
	if (initPid > 0 && int(cred.Pid) == initPid) || cred.Uid == 0 {
		return nil
	}
	return &peerError{pid: cred.Pid, uid: cred.Uid, want: initPid}
}

// pidfdOpen: see runNetwork.
func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

// dropPrivileges: for harden_test.go (Linux only).
func dropPrivileges(uid, gid int) error { return ctragent.DropPrivilegesTo(uid, gid) }
