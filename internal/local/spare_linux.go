//go:build linux

package local

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// startSpare starts a supervisor that waits for its spec.
func startSpare(exe string, env []string) (*spareShim, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	// Ours non-blocking: on the poller, so that its reads can time out.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spare supervisor"), os.NewFile(uintptr(fds[1]), "spare supervisor")
	// theirs is the spare's fd 3.
	cmd, err := execShim(exe, spareArg, append(slices.Clip(env), shimSpareEnv+"=1"), []*os.File{theirs})
	theirs.Close()
	if err != nil {
		ours.Close()
		return nil, err
	}
	// It says when it waits (its start done): only then is it idle, and
	// a spare that doesn't get there is none.
	ours.SetReadDeadline(time.Now().Add(spareStartTimeout))
	var b [1]byte
	if _, err := io.ReadFull(ours, b[:]); err != nil || b[0] != spareWaiting {
		ours.Close()
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("spare supervisor: %v", err)
	}
	ours.SetReadDeadline(time.Time{})
	return &spareShim{cmd: cmd, sock: ours}, nil
}

// awaitSpareSpec runs in a spare supervisor: it waits for the spec on the
// socket at fd 3 and puts the ready pipe it brings at fd 3. ok is false
// when the process that started the spare is gone or dropped it: the spare
// then exits without a word (nobody waits for a report).
func awaitSpareSpec() (spec []byte, ok bool) {
	sock := os.NewFile(3, "spare supervisor")
	if _, err := sock.Write([]byte{spareWaiting}); err != nil {
		return nil, false
	}
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(3, hdr[:], oob, unix.MSG_CMSG_CLOEXEC)
	for errors.Is(err, unix.EINTR) {
		n, oobn, _, _, err = unix.Recvmsg(3, hdr[:], oob, unix.MSG_CMSG_CLOEXEC)
	}
	if err != nil || n != len(hdr) {
		return nil, false
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, false
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, false
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > maxSpareSpec {
		unix.Close(fds[0])
		return nil, false
	}
	spec = make([]byte, size)
	if _, err := io.ReadFull(sock, spec); err != nil {
		unix.Close(fds[0])
		return nil, false
	}
	// The ready pipe where a supervisor started for this spec has it:
	// fd 3, inherited as its ExtraFiles are.
	sock.Close()
	if err := unix.Dup3(fds[0], 3, 0); err != nil {
		unix.Close(fds[0])
		return nil, false
	}
	unix.Close(fds[0])
	trace.Mark("shim: spare taken")
	return spec, true
}
