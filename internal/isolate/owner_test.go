//go:build linux

package isolate

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestStartOwnedBy: the user namespace a child makes belongs to the uid
// given (NS_GET_OWNER_UID), not to the caller (root), while the child's id
// maps (written by us, privileged) and the caller's own ids are as before.
func TestStartOwnedBy(t *testing.T) {
	requireRoot(t)
	const owner = 0x70fffff0
	cmd := exec.Command("/bin/sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 1000, HostID: owner, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 100, HostID: owner, Size: 1}},
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 1000, Gid: 100},
	}
	if err := StartOwnedBy(cmd, owner); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	f, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var uid uint32
	const nsGetOwnerUID = 0xb704 // _IO(0xb7, 0x4)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nsGetOwnerUID, uintptr(unsafe.Pointer(&uid))); e != 0 {
		t.Fatalf("NS_GET_OWNER_UID: %v", e)
	}
	if uid != owner {
		t.Errorf("the namespace's owner is uid %d, want %d", uid, owner)
	}
	if os.Geteuid() != 0 || os.Getuid() != 0 {
		t.Errorf("the caller's ids changed: uid %d euid %d", os.Getuid(), os.Geteuid())
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/uid_map")
	if err != nil || len(b) == 0 {
		t.Errorf("uid_map: %q %v", b, err)
	}
	if err := StartOwnedBy(exec.Command("/bin/true"), owner); err != nil {
		t.Errorf("a plain start: %v", err)
	}
	bad := exec.Command("/bin/true")
	bad.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := StartOwnedBy(bad, owner); err == nil {
		t.Error("Pdeathsig accepted (it would fire when the starting thread ends)")
	}
}
